//! Cluster-secret authentication: the daemon sends a random nonce in its
//! Hello reply and the client proves it knows the secret by returning
//! HMAC-SHA256(secret, "surge-auth-v1" || nonce). The secret never crosses
//! the wire.
//!
//! Daemons calling each other prove instead that they know the peer secret,
//! which clients never hold, under a label of its own ("surge-peer-v1"): the
//! proof has the same length, and the daemon tells the two apart by which
//! one checks, so a connection is a client's or a peer's from its `Auth` on.

use hmac::{Hmac, Mac};
use sha2::Sha256;

pub const NONCE_LEN: usize = 32;
pub const MAC_LEN: usize = 32;
const CONTEXT: &[u8] = b"surge-auth-v1";
const PEER_CONTEXT: &[u8] = b"surge-peer-v1";

type HmacSha256 = Hmac<Sha256>;

pub fn new_nonce() -> [u8; NONCE_LEN] {
    let mut n = [0u8; NONCE_LEN];
    getrandom::getrandom(&mut n).expect("the OS random source is unavailable");
    n
}

fn mac(context: &[u8], secret: &[u8], nonce: &[u8; NONCE_LEN]) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(context);
    mac.update(nonce);
    mac
}

/// A client's proof that it knows the cluster secret.
pub fn prove(secret: &[u8], nonce: &[u8; NONCE_LEN]) -> [u8; MAC_LEN] {
    mac(CONTEXT, secret, nonce).finalize().into_bytes().into()
}

/// Constant-time check of a client's proof.
pub fn verify(secret: &[u8], nonce: &[u8; NONCE_LEN], proof: &[u8; MAC_LEN]) -> bool {
    mac(CONTEXT, secret, nonce).verify_slice(proof).is_ok()
}

/// A daemon's proof, to another daemon, that it knows the peer secret.
pub fn prove_peer(peer_secret: &[u8], nonce: &[u8; NONCE_LEN]) -> [u8; MAC_LEN] {
    mac(PEER_CONTEXT, peer_secret, nonce).finalize().into_bytes().into()
}

/// Constant-time check of a peer's proof.
pub fn verify_peer(peer_secret: &[u8], nonce: &[u8; NONCE_LEN], proof: &[u8; MAC_LEN]) -> bool {
    mac(PEER_CONTEXT, peer_secret, nonce).verify_slice(proof).is_ok()
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

    #[test]
    fn a_client_proof_is_no_peer_proof_even_under_the_same_secret() {
        let nonce = new_nonce();
        assert!(!verify_peer(b"s3cret", &nonce, &prove(b"s3cret", &nonce)));
        assert!(!verify(b"s3cret", &nonce, &prove_peer(b"s3cret", &nonce)));
        assert!(verify_peer(b"peer", &nonce, &prove_peer(b"peer", &nonce)));
    }
}
