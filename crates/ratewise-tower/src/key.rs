//! Who a request is charged to: [`Key`] and the [`KeySource`]s that find it.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use http::header::{HeaderName, FORWARDED};
use http::{Extensions, HeaderMap, Method, Request, Uri};
use ipnet::IpNet;

/// Whether a policy charges each [`Key`] its own state or every request
/// one shared state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// One limiter per key.
    PerKey,
    /// One limiter shared by every key.
    Global,
}

/// The identity a request is charged to. Cheap to clone and hash; this is
/// the key of the per-key limiters (and what a shared backend such as Redis
/// stores, through its [`Display`](fmt::Display) form).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Key {
    /// Every request shares one bucket ([`KeySource::Global`]).
    Global,
    /// The shared bucket for requests that carry no key
    /// ([`MissingKey::Anonymous`]).
    Anonymous,
    /// A client address, already grouped by prefix (an IPv6 /64 is one key).
    Ip(IpAddr),
    /// A text key: an API key, a user id, a tenant.
    Text(Arc<str>),
    /// A numeric key: a user or tenant id.
    Number(u64),
}

impl Key {
    /// A text key.
    pub fn text(s: impl Into<Arc<str>>) -> Key {
        Key::Text(s.into())
    }
}

impl Key {
    /// This key as a [`KeyRef`].
    pub(crate) fn as_key_ref(&self) -> KeyRef<'_> {
        match self {
            Key::Global => KeyRef::Global,
            Key::Anonymous => KeyRef::Anonymous,
            Key::Ip(ip) => KeyRef::Ip(*ip),
            Key::Text(s) => KeyRef::Text(s),
            Key::Number(n) => KeyRef::Number(*n),
        }
    }
}

/// Hashed as its `KeyRef` is, so that a key borrowed from a request and
/// the same key owned hash alike.
impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_key_ref().hash(state);
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_key_ref().fmt(f)
    }
}

/// A [`Key`] that borrows its text from the request: what the in-memory
/// path decides with, so that an admitted request allocates no key. It
/// becomes a [`Key`] only where one must be kept (an async backend, a
/// limiter kept by keys).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyRef<'a> {
    Global,
    Anonymous,
    Ip(IpAddr),
    Text(&'a str),
    Number(u64),
}

impl KeyRef<'_> {
    /// The owned key.
    pub(crate) fn to_key(self) -> Key {
        match self {
            KeyRef::Global => Key::Global,
            KeyRef::Anonymous => Key::Anonymous,
            KeyRef::Ip(ip) => Key::Ip(ip),
            KeyRef::Text(s) => Key::Text(s.into()),
            KeyRef::Number(n) => Key::Number(n),
        }
    }
}

impl std::hash::Hash for KeyRef<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        match self {
            KeyRef::Global => state.write_u8(0),
            KeyRef::Anonymous => state.write_u8(1),
            KeyRef::Ip(ip) => {
                state.write_u8(2);
                ip.hash(state);
            }
            KeyRef::Text(s) => {
                state.write_u8(3);
                s.hash(state);
            }
            KeyRef::Number(n) => {
                state.write_u8(4);
                state.write_u64(*n);
            }
        }
    }
}

impl fmt::Display for KeyRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyRef::Global => f.write_str("global"),
            KeyRef::Anonymous => f.write_str("anonymous"),
            KeyRef::Ip(ip) => write!(f, "ip:{ip}"),
            KeyRef::Text(s) => write!(f, "text:{s}"),
            KeyRef::Number(n) => write!(f, "n:{n}"),
        }
    }
}

/// A request's key as found: borrowed from the request, or owned when a
/// closure made it.
pub(crate) enum FoundKey<'a> {
    Borrowed(KeyRef<'a>),
    Owned(Key),
}

impl FoundKey<'_> {
    pub(crate) fn get(&self) -> KeyRef<'_> {
        match self {
            FoundKey::Borrowed(k) => *k,
            FoundKey::Owned(k) => k.as_key_ref(),
        }
    }

    pub(crate) fn into_key(self) -> Key {
        match self {
            FoundKey::Borrowed(k) => k.to_key(),
            FoundKey::Owned(k) => k,
        }
    }
}

impl From<&str> for Key {
    fn from(s: &str) -> Key {
        Key::Text(s.into())
    }
}
impl From<String> for Key {
    fn from(s: String) -> Key {
        Key::Text(s.into())
    }
}
impl From<u64> for Key {
    fn from(n: u64) -> Key {
        Key::Number(n)
    }
}
impl From<IpAddr> for Key {
    fn from(ip: IpAddr) -> Key {
        Key::Ip(ip)
    }
}

/// The parts of a request a key extractor, a cost function or a bypass
/// predicate may look at.
#[derive(Clone, Copy, Debug)]
pub struct RequestInfo<'a> {
    /// The method.
    pub method: &'a Method,
    /// The URI (path and query).
    pub uri: &'a Uri,
    /// The headers.
    pub headers: &'a HeaderMap,
    /// The extensions (where earlier layers put what they learned).
    pub extensions: &'a Extensions,
}

impl<'a> RequestInfo<'a> {
    /// A view of `req`.
    pub fn new<B>(req: &'a Request<B>) -> Self {
        RequestInfo {
            method: req.method(),
            uri: req.uri(),
            headers: req.headers(),
            extensions: req.extensions(),
        }
    }

    /// The address of the peer that opened the connection: a
    /// `std::net::SocketAddr` request extension, or (feature `axum`, on by
    /// default) axum's `ConnectInfo<SocketAddr>`, which
    /// `into_make_service_with_connect_info::<SocketAddr>()` inserts.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        if let Some(a) = self.extensions.get::<SocketAddr>() {
            return Some(*a);
        }
        #[cfg(feature = "axum")]
        if let Some(a) = self
            .extensions
            .get::<axum::extract::ConnectInfo<SocketAddr>>()
        {
            return Some(a.0);
        }
        None
    }
}

/// How client addresses are grouped into keys: addresses that share the
/// first `v4` (IPv4) or `v6` (IPv6) bits are one key. IPv6 hosts usually own
/// a whole /64, so grouping by /64 (the default) stops one host from minting
/// 2⁶⁴ keys. IPv4-mapped IPv6 addresses are treated as IPv4.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpGrouping {
    /// IPv4 prefix length (0..=32), 32 by default.
    pub v4: u8,
    /// IPv6 prefix length (0..=128), 64 by default.
    pub v6: u8,
}

impl Default for IpGrouping {
    fn default() -> Self {
        IpGrouping { v4: 32, v6: 64 }
    }
}

impl IpGrouping {
    /// The key of `ip`: the address with the bits past the prefix cleared.
    pub fn group(&self, ip: IpAddr) -> IpAddr {
        let ip = match ip {
            IpAddr::V6(v6) => v6
                .to_ipv4_mapped()
                .map(IpAddr::V4)
                .unwrap_or(IpAddr::V6(v6)),
            v4 => v4,
        };
        match ip {
            IpAddr::V4(a) => {
                let bits = u32::from(a);
                let mask = mask_u32(self.v4);
                IpAddr::V4(Ipv4Addr::from(bits & mask))
            }
            IpAddr::V6(a) => {
                let bits = u128::from(a);
                let mask = mask_u128(self.v6);
                IpAddr::V6(Ipv6Addr::from(bits & mask))
            }
        }
    }
}

fn mask_u32(prefix: u8) -> u32 {
    match prefix.min(32) {
        0 => 0,
        p => u32::MAX << (32 - u32::from(p)),
    }
}

fn mask_u128(prefix: u8) -> u128 {
    match prefix.min(128) {
        0 => 0,
        p => u128::MAX << (128 - u32::from(p)),
    }
}

/// Which header trusted proxies write the client chain into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2`.
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for=proxy1` (`for=` of each element).
    Forwarded,
}

/// The client address behind reverse proxies you run.
///
/// A proxy appends the address it received the request from to the chain
/// header, so the trustworthy part of the chain is at its right end. The
/// client is found by walking from the peer towards the left: while the
/// current address is one of your `trusted` proxies and fewer than `hops`
/// entries were taken, step to the next entry from the right. The first
/// untrusted address, or the address reached after `hops` steps, is the
/// client. A peer that is not a trusted proxy is the client itself: its
/// header is ignored, however it is spoofed.
#[derive(Clone, Debug)]
pub struct TrustedProxies {
    /// The proxies' networks (`10.0.0.0/8`, a single address as `/32`).
    pub trusted: Vec<IpNet>,
    /// How many proxies stand between the client and this service.
    pub hops: usize,
    /// The header they write.
    pub header: ProxyHeader,
}

impl TrustedProxies {
    /// `hops` proxies from `trusted`, writing `X-Forwarded-For`.
    pub fn new(hops: usize, trusted: impl IntoIterator<Item = IpNet>) -> Self {
        TrustedProxies {
            trusted: trusted.into_iter().collect(),
            hops,
            header: ProxyHeader::XForwardedFor,
        }
    }

    /// The proxies write RFC 7239 `Forwarded` instead.
    pub fn forwarded(mut self) -> Self {
        self.header = ProxyHeader::Forwarded;
        self
    }

    fn is_trusted(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|n| n.contains(&ip))
    }

    /// The client address for a request from `peer` with `headers`.
    pub fn client_ip(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let name: &HeaderName = match self.header {
            ProxyHeader::XForwardedFor => &X_FORWARDED_FOR,
            ProxyHeader::Forwarded => &FORWARDED,
        };
        let forwarded = self.header == ProxyHeader::Forwarded;
        let mut chain = headers
            .get_all(name)
            .iter()
            .rev()
            .flat_map(|v| v.as_bytes().rsplit(|b| *b == b','))
            .map(|entry| {
                if forwarded {
                    forwarded_for(entry)
                } else {
                    parse_addr(entry)
                }
            });
        let mut addr = peer;
        for _ in 0..self.hops {
            if !self.is_trusted(addr) {
                return addr;
            }
            match chain.next() {
                Some(Some(next)) => addr = next,
                // An entry that is not an address (`unknown`, an obfuscated
                // node, garbage) ends the walk at the last proxy we trust.
                Some(None) | None => return addr,
            }
        }
        addr
    }
}

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// `for=` of one `Forwarded` element (`for=1.2.3.4;proto=http`).
fn forwarded_for(element: &[u8]) -> Option<IpAddr> {
    element.split(|b| *b == b';').find_map(|pair| {
        let pair = trim(pair);
        let (k, v) = pair.split_at(pair.iter().position(|b| *b == b'=')?);
        k.eq_ignore_ascii_case(b"for")
            .then(|| parse_addr(&v[1..]))
            .flatten()
    })
}

fn trim(b: &[u8]) -> &[u8] {
    let start = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &b[start..end.max(start)]
}

/// An address as proxies write it: `1.2.3.4`, `1.2.3.4:80`, `2001:db8::1`,
/// `[2001:db8::1]:80`, optionally in double quotes.
fn parse_addr(raw: &[u8]) -> Option<IpAddr> {
    let s = std::str::from_utf8(trim(raw)).ok()?;
    let s = s.trim_matches('"');
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(sa) = s.parse::<SocketAddr>() {
        return Some(sa.ip());
    }
    let inner = s.strip_prefix('[')?.split(']').next()?;
    inner.parse().ok()
}

/// A closure that finds a key.
pub type KeyFn = Arc<dyn Fn(&RequestInfo<'_>) -> Option<Key> + Send + Sync>;

/// Where the key of a request comes from.
#[derive(Clone)]
#[non_exhaustive]
pub enum KeySource {
    /// One key for every request.
    Global,
    /// The peer's address, grouped.
    PeerIp(IpGrouping),
    /// The client's address behind trusted proxies, grouped.
    ClientIp(TrustedProxies, IpGrouping),
    /// The value of a header (an API key); a missing or non-UTF-8 value is
    /// no key.
    Header(HeaderName),
    /// Anything: a value an auth layer put in the extensions, a path segment.
    Custom(KeyFn),
}

impl fmt::Debug for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySource::Global => f.write_str("Global"),
            KeySource::PeerIp(g) => f.debug_tuple("PeerIp").field(g).finish(),
            KeySource::ClientIp(p, g) => f.debug_tuple("ClientIp").field(p).field(g).finish(),
            KeySource::Header(h) => f.debug_tuple("Header").field(h).finish(),
            KeySource::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

impl KeySource {
    /// The peer address, IPv6 grouped by /64.
    pub fn peer_ip() -> Self {
        KeySource::PeerIp(IpGrouping::default())
    }

    /// The client address behind `proxies`, IPv6 grouped by /64.
    pub fn client_ip(proxies: TrustedProxies) -> Self {
        KeySource::ClientIp(proxies, IpGrouping::default())
    }

    /// The value of header `name` (e.g. `x-api-key`).
    pub fn header(name: HeaderName) -> Self {
        KeySource::Header(name)
    }

    /// A value of type `T` in the request extensions (put there by an
    /// earlier authentication layer), turned into a key by `f`.
    pub fn extension<T, F>(f: F) -> Self
    where
        T: Send + Sync + 'static,
        F: Fn(&T) -> Key + Send + Sync + 'static,
    {
        KeySource::Custom(Arc::new(move |info| info.extensions.get::<T>().map(&f)))
    }

    /// Any function of the request.
    pub fn custom<F>(f: F) -> Self
    where
        F: Fn(&RequestInfo<'_>) -> Option<Key> + Send + Sync + 'static,
    {
        KeySource::Custom(Arc::new(f))
    }

    /// The key of a request, or `None` if it carries none.
    pub fn extract(&self, info: &RequestInfo<'_>) -> Option<Key> {
        self.find(info).map(FoundKey::into_key)
    }

    /// [`KeySource::extract`], borrowing a header's text from the request.
    pub(crate) fn find<'a>(&self, info: &RequestInfo<'a>) -> Option<FoundKey<'a>> {
        let found = |k| Some(FoundKey::Borrowed(k));
        match self {
            KeySource::Global => found(KeyRef::Global),
            KeySource::PeerIp(g) => found(KeyRef::Ip(g.group(info.peer_addr()?.ip()))),
            KeySource::ClientIp(p, g) => found(KeyRef::Ip(
                g.group(p.client_ip(info.peer_addr()?.ip(), info.headers)),
            )),
            KeySource::Header(name) => info
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .filter(|s| !s.is_empty())
                .map(|s| FoundKey::Borrowed(KeyRef::Text(s))),
            KeySource::Custom(f) => f(info).map(FoundKey::Owned),
        }
    }
}

/// What to do with a request whose [`KeySource`] finds no key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MissingKey {
    /// Charge it to one shared bucket, [`Key::Anonymous`] (the default).
    Anonymous,
    /// Refuse it with this status (e.g. 401 for a missing API key), with a
    /// problem+json body.
    Reject(http::StatusCode),
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    fn any_key() -> impl Strategy<Value = Key> {
        prop_oneof![
            Just(Key::Global),
            Just(Key::Anonymous),
            any::<[u8; 4]>().prop_map(|b| Key::Ip(IpAddr::from(b))),
            any::<[u8; 16]>().prop_map(|b| Key::Ip(IpAddr::from(b))),
            ".{0,40}".prop_map(Key::text),
            any::<u64>().prop_map(Key::Number),
        ]
    }

    proptest! {
        /// The in-memory path decides with keys borrowed from the request
        /// and the policy stores key their tables by hash: a borrowed key
        /// must hash, compare and print exactly as the owned one.
        #[test]
        fn a_borrowed_key_is_its_owned_key(a in any_key(), b in any_key()) {
            let hash = |k: &dyn Fn(&mut std::collections::hash_map::DefaultHasher)| {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                k(&mut h);
                std::hash::Hasher::finish(&h)
            };
            use std::hash::Hash;
            prop_assert_eq!(
                hash(&|h| a.hash(h)),
                hash(&|h| a.as_key_ref().hash(h))
            );
            prop_assert_eq!(a.as_key_ref().to_key(), a.clone());
            prop_assert_eq!(a.as_key_ref().to_string(), a.to_string());
            prop_assert_eq!(a.as_key_ref() == b.as_key_ref(), a == b);
        }
    }

    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ipv6_is_grouped_by_64_and_mapped_v4_is_v4() {
        let g = IpGrouping::default();
        assert_eq!(g.group(ip("2001:db8:1:2:aaaa::1")), ip("2001:db8:1:2::"));
        assert_eq!(
            g.group(ip("2001:db8:1:2:ffff::9")),
            g.group(ip("2001:db8:1:2::7"))
        );
        assert_ne!(
            g.group(ip("2001:db8:1:3::1")),
            g.group(ip("2001:db8:1:2::1"))
        );
        assert_eq!(g.group(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
        let g24 = IpGrouping { v4: 24, v6: 48 };
        assert_eq!(g24.group(ip("192.0.2.7")), ip("192.0.2.0"));
        assert_eq!(g24.group(ip("2001:db8:1:2::1")), ip("2001:db8:1::"));
        assert_eq!(
            IpGrouping { v4: 0, v6: 0 }.group(ip("8.8.8.8")),
            ip("0.0.0.0")
        );
    }

    fn headers(name: &str, values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn only_trusted_hops_are_believed() {
        let p = TrustedProxies::new(2, ["10.0.0.0/8".parse().unwrap()]);
        let h = headers("x-forwarded-for", &["6.6.6.6, 1.2.3.4", "10.0.0.5"]);
        // Peer 10.0.0.9 (trusted) → 10.0.0.5 (trusted) → 1.2.3.4 after 2 hops.
        assert_eq!(p.client_ip(ip("10.0.0.9"), &h), ip("1.2.3.4"));
        // An untrusted peer's header is ignored entirely.
        assert_eq!(p.client_ip(ip("7.7.7.7"), &h), ip("7.7.7.7"));
        // An untrusted entry in the chain is the client.
        let h = headers("x-forwarded-for", &["6.6.6.6, 5.5.5.5"]);
        assert_eq!(p.client_ip(ip("10.0.0.9"), &h), ip("5.5.5.5"));
        // One hop: the rightmost entry, whatever the client prepended.
        let p1 = TrustedProxies::new(1, ["10.0.0.0/8".parse().unwrap()]);
        let h = headers("x-forwarded-for", &["10.1.1.1, 9.9.9.9"]);
        assert_eq!(p1.client_ip(ip("10.0.0.9"), &h), ip("9.9.9.9"));
        // No header: the proxy itself.
        assert_eq!(
            p1.client_ip(ip("10.0.0.9"), &HeaderMap::new()),
            ip("10.0.0.9")
        );
        // Garbage stops the walk.
        let h = headers("x-forwarded-for", &["nonsense"]);
        assert_eq!(p1.client_ip(ip("10.0.0.9"), &h), ip("10.0.0.9"));
    }

    mod props {
        use super::*;

        fn any_ip() -> impl Strategy<Value = IpAddr> {
            prop_oneof![
                any::<u32>().prop_map(|b| IpAddr::V4(Ipv4Addr::from(b))),
                any::<u128>().prop_map(|b| IpAddr::V6(Ipv6Addr::from(b))),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            /// Grouping is idempotent, and two addresses share a key
            /// exactly when they share the prefix.
            #[test]
            fn grouping_keys_are_prefixes(a in any::<u128>(), b in any::<u128>(), p in 0u8..=128) {
                let g = IpGrouping { v4: 32, v6: p };
                let (x, y) = (IpAddr::V6(Ipv6Addr::from(a)), IpAddr::V6(Ipv6Addr::from(b)));
                prop_assume!(Ipv6Addr::from(a).to_ipv4_mapped().is_none());
                prop_assume!(Ipv6Addr::from(b).to_ipv4_mapped().is_none());
                prop_assert_eq!(g.group(g.group(x)), g.group(x));
                let same = p == 0 || (a ^ b) >> (128 - u32::from(p)) == 0;
                prop_assert_eq!(g.group(x) == g.group(y), same);
            }

            /// Whatever the header says, the answer is the peer or an
            /// address written in the header, and an untrusted peer is
            /// always its own client. Arbitrary bytes never panic.
            #[test]
            fn the_client_is_the_peer_or_in_the_chain(
                peer in any_ip(),
                chain in proptest::collection::vec(any_ip(), 0..6),
                junk in proptest::collection::vec(any::<u8>(), 0..40),
                hops in 0usize..5,
                trusted_peer in any::<bool>(),
            ) {
                let net: IpNet = IpNet::from(peer);
                let proxies = TrustedProxies::new(hops, if trusted_peer { vec![net] } else { vec![] });
                let mut h = HeaderMap::new();
                let text: Vec<String> = chain.iter().map(|ip| ip.to_string()).collect();
                h.append(&X_FORWARDED_FOR, text.join(", ").parse().unwrap());
                if let Ok(v) = http::HeaderValue::from_bytes(&junk) {
                    h.append(&X_FORWARDED_FOR, v.clone());
                    h.append(FORWARDED, v);
                }
                for p in [proxies.clone(), proxies.forwarded()] {
                    let client = p.client_ip(peer, &h);
                    prop_assert!(client == peer || chain.contains(&client) || !junk.is_empty());
                    if !trusted_peer || hops == 0 {
                        prop_assert_eq!(client, peer);
                    }
                }
            }
        }
    }

    #[test]
    fn forwarded_header_for_values() {
        let p = TrustedProxies::new(1, ["10.0.0.0/8".parse().unwrap()]).forwarded();
        let h = headers(
            "forwarded",
            &[r#"for=6.6.6.6, for="[2001:db8::1]:4711";proto=https;by=10.0.0.1"#],
        );
        assert_eq!(p.client_ip(ip("10.0.0.2"), &h), ip("2001:db8::1"));
        let h = headers("forwarded", &["proto=http;For=192.0.2.60:8080"]);
        assert_eq!(p.client_ip(ip("10.0.0.2"), &h), ip("192.0.2.60"));
        let h = headers("forwarded", &["for=unknown"]);
        assert_eq!(p.client_ip(ip("10.0.0.2"), &h), ip("10.0.0.2"));
    }
}
