//! CIDR blocks for `[proxy] trusted_proxies`.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// An IPv4 or IPv6 network: an address and a prefix length, with no host
/// bits set (`10.0.0.0/8`, `fd00::/8`). A bare address is a one-host block
/// (`/32` or `/128`).
///
/// ```
/// use tollgate_http::cidr::Cidr;
///
/// let net: Cidr = "10.0.0.0/8".parse().unwrap();
/// assert!(net.contains("10.1.2.3".parse().unwrap()));
/// assert!(!net.contains("11.0.0.1".parse().unwrap()));
/// assert!("10.0.0.1/8".parse::<Cidr>().is_err()); // host bits set
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// The network address.
    #[must_use]
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length in bits.
    #[must_use]
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `ip` is inside this block. An IPv4-mapped IPv6 address
    /// (`::ffff:10.1.2.3`) is matched as the IPv4 address it carries.
    #[must_use]
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 @ IpAddr::V4(_) => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = mask_v4(self.prefix);
                u32::from(ip) & mask == u32::from(net)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = mask_v6(self.prefix);
                u128::from(ip) & mask == u128::from(net)
            }
            _ => false,
        }
    }
}

fn mask_v4(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

fn mask_v6(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (addr_text, prefix_text) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr_text.parse().map_err(|_| {
            format!("{s:?} is not a CIDR block: {addr_text:?} is not an IPv4 or IPv6 address")
        })?;
        let max: u8 = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix_text {
            None => max,
            Some(p) => match p.parse::<u8>() {
                Ok(n) if n <= max && !p.starts_with('+') => n,
                _ => {
                    return Err(format!(
                        "{s:?} is not a CIDR block: prefix length {p:?} must be a whole number \
                         from 0 to {max}"
                    ));
                }
            },
        };
        let network = match addr {
            IpAddr::V4(v4) => IpAddr::V4((u32::from(v4) & mask_v4(prefix)).into()),
            IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & mask_v6(prefix)).into()),
        };
        if network != addr {
            return Err(format!(
                "{s:?} has host bits set after the /{prefix} prefix; did you mean \
                 \"{network}/{prefix}\"?"
            ));
        }
        Ok(Self { addr, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("test address")
    }

    #[test]
    fn parses_blocks_and_matches() {
        let v4: Cidr = "192.168.0.0/16".parse().expect("valid");
        assert!(v4.contains(ip("192.168.255.1")));
        assert!(!v4.contains(ip("192.169.0.1")));
        assert!(v4.contains(ip("::ffff:192.168.1.1")));
        let all: Cidr = "0.0.0.0/0".parse().expect("valid");
        assert!(all.contains(ip("8.8.8.8")));
        assert!(!all.contains(ip("::1")));
        let host: Cidr = "127.0.0.1".parse().expect("valid");
        assert_eq!(host.prefix(), 32);
        assert!(host.contains(ip("127.0.0.1")));
        assert!(!host.contains(ip("127.0.0.2")));
        let v6: Cidr = "fd00::/8".parse().expect("valid");
        assert!(v6.contains(ip("fd12::1")));
        assert!(!v6.contains(ip("fe80::1")));
        assert_eq!(v6.to_string(), "fd00::/8");
    }

    #[test]
    fn rejects_bad_blocks() {
        for bad in [
            "",
            "10.0.0.0/33",
            "10.0.0.0/-1",
            "10.0.0.0/+8",
            "10.0.0.0/",
            "10.0.0/8",
            "fd00::/129",
            "10.0.0.1/8",
            "banana",
            "10.0.0.0/8/8",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad:?} should be rejected");
        }
        assert_eq!(
            "10.0.0.1/8".parse::<Cidr>().expect_err("host bits"),
            "\"10.0.0.1/8\" has host bits set after the /8 prefix; did you mean \"10.0.0.0/8\"?"
        );
    }
}
