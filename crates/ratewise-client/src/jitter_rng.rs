//! The generator behind every strategy's jitter: ChaCha8's output stream,
//! each word computed when drawn.
//!
//! ChaCha8 is a fixed, portable algorithm, so the same seed draws the same
//! numbers on every platform (rand's `SmallRng` differs between 32- and
//! 64-bit targets) and a simulation replays byte for byte anywhere.
//! `rand_chacha::ChaCha8Rng` buffers four 64-byte blocks (about 320 bytes in
//! all); every client strategy holds one, and a simulated fleet of a hundred
//! thousand clients holds a hundred thousand. This generator produces the
//! same words from the same `u64` seed (a test compares the two over random
//! seeds and draws) in 16 bytes: the seed and the position in the stream.
//! A draw expands the seed into the key (eight PCG32 steps, as
//! `SeedableRng::seed_from_u64` does) and computes its block (a few dozen
//! nanoseconds in all); jitter is drawn once per refusal or sleep, never per
//! request on the fast path.

use rand::RngCore;

/// ChaCha8 with a 64-bit block counter and stream 0, keyed as
/// `rand_chacha::ChaCha8Rng::seed_from_u64` keys it, no block buffered.
#[derive(Clone, Debug)]
pub(crate) struct JitterRng {
    seed: u64,
    /// The next word of the stream to hand out (block `pos / 16`, word
    /// `pos % 16`).
    pos: u64,
}

const CONSTANTS: [u32; 4] = [0x6170_7865, 0x3320_646e, 0x7962_2d32, 0x6b20_6574];

fn quarter(s: &mut [u32; 16], a: usize, b: usize, c: usize, d: usize) {
    s[a] = s[a].wrapping_add(s[b]);
    s[d] = (s[d] ^ s[a]).rotate_left(16);
    s[c] = s[c].wrapping_add(s[d]);
    s[b] = (s[b] ^ s[c]).rotate_left(12);
    s[a] = s[a].wrapping_add(s[b]);
    s[d] = (s[d] ^ s[a]).rotate_left(8);
    s[c] = s[c].wrapping_add(s[d]);
    s[b] = (s[b] ^ s[c]).rotate_left(7);
}

impl JitterRng {
    /// The generator `rand_chacha::ChaCha8Rng::seed_from_u64(seed)` is.
    pub(crate) fn seed_from_u64(seed: u64) -> JitterRng {
        JitterRng { seed, pos: 0 }
    }

    /// The key `SeedableRng::seed_from_u64` derives from `seed`: eight
    /// words of PCG32 (rand_core 0.9's expansion).
    fn key(mut state: u64) -> [u32; 8] {
        const MUL: u64 = 6_364_136_223_846_793_005;
        const INC: u64 = 11_634_580_027_462_260_723;
        let mut key = [0u32; 8];
        for k in &mut key {
            state = state.wrapping_mul(MUL).wrapping_add(INC);
            let xorshifted = (((state >> 18) ^ state) >> 27) as u32;
            *k = xorshifted.rotate_right((state >> 59) as u32);
        }
        key
    }

    /// Block `n` of the stream.
    fn block(&self, n: u64) -> [u32; 16] {
        let mut input = [0u32; 16];
        input[..4].copy_from_slice(&CONSTANTS);
        input[4..12].copy_from_slice(&Self::key(self.seed));
        input[12] = n as u32;
        input[13] = (n >> 32) as u32;
        let mut s = input;
        for _ in 0..4 {
            quarter(&mut s, 0, 4, 8, 12);
            quarter(&mut s, 1, 5, 9, 13);
            quarter(&mut s, 2, 6, 10, 14);
            quarter(&mut s, 3, 7, 11, 15);
            quarter(&mut s, 0, 5, 10, 15);
            quarter(&mut s, 1, 6, 11, 12);
            quarter(&mut s, 2, 7, 8, 13);
            quarter(&mut s, 3, 4, 9, 14);
        }
        for (w, i) in s.iter_mut().zip(input) {
            *w = w.wrapping_add(i);
        }
        s
    }
}

impl RngCore for JitterRng {
    fn next_u32(&mut self) -> u32 {
        let w = self.block(self.pos / 16)[(self.pos % 16) as usize];
        self.pos = self.pos.wrapping_add(1);
        w
    }

    fn next_u64(&mut self) -> u64 {
        // Two words, low first, as a block RNG reads them; one block
        // computed unless they straddle two.
        let (lo, hi) = if self.pos % 16 < 15 {
            let b = self.block(self.pos / 16);
            let i = (self.pos % 16) as usize;
            self.pos = self.pos.wrapping_add(2);
            (b[i], b[i + 1])
        } else {
            (self.next_u32(), self.next_u32())
        };
        u64::from(hi) << 32 | u64::from(lo)
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        // Whole words, little-endian; the rest of a partly used word is
        // dropped.
        for chunk in dest.chunks_mut(4) {
            let w = self.next_u32().to_le_bytes();
            chunk.copy_from_slice(&w[..chunk.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::{Rng, RngCore, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    proptest! {
        /// The same words as rand_chacha's ChaCha8 from the same seed, over
        /// any mix of 32- and 64-bit draws (across its 64-word buffer's
        /// edges and this one's 16-word one).
        #[test]
        fn draws_what_rand_chacha_draws(seed in any::<u64>(), draws in proptest::collection::vec(any::<bool>(), 1..300)) {
            let mut ours = JitterRng::seed_from_u64(seed);
            let mut theirs = ChaCha8Rng::seed_from_u64(seed);
            for wide in draws {
                if wide {
                    prop_assert_eq!(ours.next_u64(), theirs.next_u64());
                } else {
                    prop_assert_eq!(ours.next_u32(), theirs.next_u32());
                }
            }
            prop_assert_eq!(ours.random::<f64>(), theirs.random::<f64>());
        }
    }

    #[test]
    fn it_is_a_twentieth_of_the_size() {
        assert!(std::mem::size_of::<JitterRng>() <= 16);
        assert!(std::mem::size_of::<ChaCha8Rng>() >= 3 * 100);
    }
}
