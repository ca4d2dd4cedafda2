//! Cluster-secret authentication: the daemon sends a random nonce in its
//! Hello reply and the client proves it knows the secret by returning
//! HMAC-SHA256(secret, "surge-auth-v1" || nonce). The secret never crosses
//! the wire.

use hmac::{Hmac, Mac};
use sha2::Sha256;

pub const NONCE_LEN: usize = 32;
pub const MAC_LEN: usize = 32;
const CONTEXT: &[u8] = b"surge-auth-v1";

type HmacSha256 = Hmac<Sha256>;

pub fn new_nonce() -> [u8; NONCE_LEN] {
    let mut n = [0u8; NONCE_LEN];
    getrandom::getrandom(&mut n).expect("the OS random source is unavailable");
    n
}

pub fn prove(secret: &[u8], nonce: &[u8; NONCE_LEN]) -> [u8; MAC_LEN] {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(CONTEXT);
    mac.update(nonce);
    mac.finalize().into_bytes().into()
}

/// Constant-time check of a client's proof.
pub fn verify(secret: &[u8], nonce: &[u8; NONCE_LEN], proof: &[u8; MAC_LEN]) -> bool {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(CONTEXT);
    mac.update(nonce);
    mac.verify_slice(proof).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn right_secret_passes_wrong_secret_and_replayed_nonce_fail() {
        let nonce = new_nonce();
        let proof = prove(b"s3cret", &nonce);
        assert!(verify(b"s3cret", &nonce, &proof));
        assert!(!verify(b"other", &nonce, &proof));
        assert!(!verify(b"s3cret", &new_nonce(), &proof));
    }
}
