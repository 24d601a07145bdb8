//! The generator behind every strategy's jitter: ChaCha8's output stream,
//! each word computed when drawn.
//!
//! ChaCha8 is a fixed, portable algorithm, so the same seed draws the same
//! numbers on every platform (rand's `SmallRng` differs between 32- and
//! 64-bit targets) and a simulation replays byte for byte anywhere.
//! `rand_chacha::ChaCha8Rng` buffers four 64-byte blocks (about 320 bytes in
//! all); every client strategy holds one, and a simulated fleet of a hundred
//! thousand clients holds a hundred thousand. This generator produces the
//! same words from the same seed (a test compares the two over random seeds
//! and draws) in 40 bytes: the key and the position in the stream. A draw
//! computes its block (a few dozen nanoseconds); jitter is drawn once per
//! refusal or sleep, never per request on the fast path.

use rand::{RngCore, SeedableRng};

/// ChaCha8 with a 64-bit block counter and stream 0, as
/// `rand_chacha::ChaCha8Rng`, no block buffered.
#[derive(Clone, Debug)]
pub(crate) struct JitterRng {
    key: [u32; 8],
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
    /// Block `n` of the key's stream.
    fn block(key: &[u32; 8], n: u64) -> [u32; 16] {
        let mut input = [0u32; 16];
        input[..4].copy_from_slice(&CONSTANTS);
        input[4..12].copy_from_slice(key);
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

impl SeedableRng for JitterRng {
    type Seed = [u8; 32];

    fn from_seed(seed: [u8; 32]) -> Self {
        let mut key = [0u32; 8];
        for (k, b) in key.iter_mut().zip(seed.chunks_exact(4)) {
            *k = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        JitterRng { key, pos: 0 }
    }
}

impl RngCore for JitterRng {
    fn next_u32(&mut self) -> u32 {
        let w = Self::block(&self.key, self.pos / 16)[(self.pos % 16) as usize];
        self.pos = self.pos.wrapping_add(1);
        w
    }

    fn next_u64(&mut self) -> u64 {
        // Two words, low first, as a block RNG reads them; one block
        // computed unless they straddle two.
        let (lo, hi) = if self.pos % 16 < 15 {
            let b = Self::block(&self.key, self.pos / 16);
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
    fn it_is_an_eighth_of_the_size() {
        assert!(std::mem::size_of::<JitterRng>() <= 40);
        assert!(std::mem::size_of::<ChaCha8Rng>() >= 3 * 100);
    }
}
