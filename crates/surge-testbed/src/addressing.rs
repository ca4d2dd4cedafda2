//! Names and addresses derived from a testbed's name, so that everything a
//! testbed makes can be found again from the name alone (by `down` after a
//! crash, by `status` and `exec` in another shell).

use crate::Error;
use std::net::Ipv4Addr;

/// Longest testbed name: `surge-<name>-h249` must stay short and readable,
/// and the name is part of every namespace.
pub const MAX_NAME_LEN: usize = 8;

/// One /24 per testbed leaves .1 ... .254 for hosts; .255 is broadcast.
pub const MAX_HOSTS: u32 = 254;

/// A testbed name is 1 to 8 characters of `a-z0-9`: no `-`, so the prefix
/// `surge-<name>-` of one testbed is never a prefix of another's.
pub fn validate_name(name: &str) -> Result<(), Error> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidSpec(format!(
            "testbed name {name:?} must be 1 to {MAX_NAME_LEN} characters of a-z and 0-9 \
             (it becomes part of namespace names such as surge-{name}-h0)"
        )))
    }
}

/// The prefix of every network namespace of testbed `name`.
pub fn netns_prefix(name: &str) -> String {
    format!("surge-{name}-")
}

pub fn hub_netns(name: &str) -> String {
    format!("surge-{name}-hub")
}

pub fn host_netns(name: &str, index: u32) -> String {
    format!("surge-{name}-h{index}")
}

/// The testbed's subnet `10.x.y.0/24`: FNV-1a of the name picks x in
/// 64..=191 and y in 0..=255. The namespaces already keep two testbeds'
/// traffic apart; distinct subnets keep their addresses apart too, so an
/// address in a log or cluster file tells which testbed it belongs to.
pub fn subnet(name: &str) -> (u8, u8) {
    let hash = name.bytes().fold(0x811c_9dc5_u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
    let x = 64 + ((hash >> 8) % 128) as u8;
    let y = (hash & 0xff) as u8;
    (x, y)
}

/// Host `index` is `10.x.y.(index+1)`.
pub fn host_ip(name: &str, index: u32) -> Ipv4Addr {
    assert!(index < MAX_HOSTS, "host index {index} outside the /24");
    let (x, y) = subnet(name);
    Ipv4Addr::new(10, x, y, (index + 1) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_short_lowercase_alphanumerics() {
        for good in ["tb", "a", "t1", "12345678", "abcdefgh"] {
            assert!(validate_name(good).is_ok(), "{good}");
        }
        for bad in ["", "TB", "t-b", "t_b", "123456789", "tb ", "é", "a/b"] {
            let e = validate_name(bad).unwrap_err().to_string();
            assert!(e.contains("a-z and 0-9"), "{bad}: {e}");
        }
    }

    #[test]
    fn subnet_is_stable_in_range_and_differs_between_names() {
        let (x, _) = subnet("tb");
        assert!((64..=191).contains(&x));
        assert_eq!(subnet("tb"), subnet("tb"));
        let names = ["tb", "tb2", "a", "b", "ci", "rate", "down", "bad"];
        let mut subnets: Vec<_> = names.iter().map(|n| subnet(n)).collect();
        subnets.sort();
        subnets.dedup();
        assert_eq!(subnets.len(), names.len(), "these names should not collide");
        for n in names {
            assert!((64..=191).contains(&subnet(n).0));
        }
    }

    #[test]
    fn hosts_get_consecutive_addresses_and_namespaces() {
        let (x, y) = subnet("tb");
        assert_eq!(host_ip("tb", 0), Ipv4Addr::new(10, x, y, 1));
        assert_eq!(host_ip("tb", 253), Ipv4Addr::new(10, x, y, 254));
        assert_eq!(host_netns("tb", 3), "surge-tb-h3");
        assert_eq!(hub_netns("tb"), "surge-tb-hub");
        assert!(hub_netns("tb").starts_with(&netns_prefix("tb")));
        assert!(!host_netns("tb2", 0).starts_with(&netns_prefix("tb")));
    }
}
