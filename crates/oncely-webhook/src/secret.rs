//! Signing secrets: the keys one source accepts (several while a secret is rotated) and the
//! one comparison every provider's check ends in.
//!
//! The HMAC is RustCrypto's `hmac` over `sha2`; the tag is computed once per key and compared
//! with every signature the request carries through `subtle` (constant time, and every pair
//! is compared, so the time taken does not say which key or signature came closest).

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::{Choice, ConstantTimeEq};

type HmacSha256 = Hmac<Sha256>;

/// A secret given at construction could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// No secret was given: the source would accept nothing.
    #[error("no signing secret given; a webhook source needs at least one")]
    None,
    /// A secret is empty.
    #[error("signing secret {index} is empty")]
    Empty {
        /// Its position in the list (0-based).
        index: usize,
    },
    /// A Standard Webhooks secret is not `whsec_` followed by base64.
    #[error("signing secret {index} is not `whsec_<base64>`: {why}")]
    NotBase64 {
        /// Its position in the list (0-based).
        index: usize,
        /// What the decoder said.
        why: String,
    },
}

/// The HMAC-SHA256 keys of one source. Its `Debug` shows how many there are, never a key.
#[derive(Clone)]
pub(crate) struct Keys(Vec<Vec<u8>>);

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Keys({} secret(s))", self.0.len())
    }
}

impl Keys {
    /// The keys, at least one, none empty.
    pub(crate) fn new(keys: Vec<Vec<u8>>) -> Result<Self, SecretError> {
        if keys.is_empty() {
            return Err(SecretError::None);
        }
        if let Some(index) = keys.iter().position(Vec::is_empty) {
            return Err(SecretError::Empty { index });
        }
        Ok(Self(keys))
    }

    /// The tag of `message` (its parts concatenated) under the first key: what a sender
    /// holding that secret puts in its signature header.
    pub(crate) fn sign(&self, message: &[&[u8]]) -> [u8; 32] {
        tag(&self.0[0], message)
    }

    /// Whether one of `signatures` is the tag of `message` under one of the keys.
    pub(crate) fn any_matches(&self, message: &[&[u8]], signatures: &[Vec<u8>]) -> bool {
        let mut found = Choice::from(0);
        for key in &self.0 {
            let tag = tag(key, message);
            for signature in signatures {
                // Slices of another length compare unequal (the length is no secret).
                found |= tag.as_slice().ct_eq(signature.as_slice());
            }
        }
        found.into()
    }
}

fn tag(key: &[u8], message: &[&[u8]]) -> [u8; 32] {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes a key of any length");
    for part in message {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_any_key_and_any_signature() {
        let keys = Keys::new(vec![b"old".to_vec(), b"new".to_vec()]).unwrap();
        let by_new = tag(b"new", &[b"a.", b"b"]);
        assert!(keys.any_matches(&[b"a.b"], &[vec![1; 32], by_new.to_vec()]));
        assert!(!keys.any_matches(&[b"a.c"], &[by_new.to_vec()]));
        assert!(!keys.any_matches(&[b"a.b"], &[by_new[..31].to_vec()]));
        assert!(!keys.any_matches(&[b"a.b"], &[]));
    }

    #[test]
    fn refuses_no_key_and_empty_keys() {
        assert_eq!(Keys::new(vec![]).unwrap_err(), SecretError::None);
        assert_eq!(
            Keys::new(vec![b"k".to_vec(), vec![]]).unwrap_err(),
            SecretError::Empty { index: 1 }
        );
        assert_eq!(
            format!("{:?}", Keys::new(vec![b"k".to_vec()]).unwrap()),
            "Keys(1 secret(s))"
        );
    }
}
