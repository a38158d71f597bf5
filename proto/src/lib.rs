//! The nqueens wire schema (`proto/nqueens/v1/*.proto`, package
//! `nqueens.v1`) and checked conversions between it and the core types
//! ([`convert`], re-exported here).
//!
//! Conversions *from* the wire never trust the sender: a subproblem is
//! re-derived from its id by the plan and must equal the payload sent.

pub mod client;
pub mod codec;
pub mod convert;
pub mod refusal;
pub mod worker_client;

pub use convert::*;

/// The most bytes of a solver version (a worker's, or a result's) that a
/// coordinator accepts.
pub const MAX_VERSION: usize = 64;

/// `version` as a worker may send it: control characters made spaces,
/// cut to [`MAX_VERSION`] bytes at a character boundary (a card's name
/// can be long, and a worker may name several).
pub fn fit_version(version: &str) -> String {
    let mut out = String::with_capacity(MAX_VERSION);
    for c in version.chars() {
        let c = if c.is_control() { ' ' } else { c };
        if out.len() + c.len_utf8() > MAX_VERSION {
            break;
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod version_tests {
    use super::*;

    #[test]
    fn a_version_is_cut_to_the_limit_at_a_character_boundary() {
        let long = format!("0.1.0 avx512+gpu:{}", "é".repeat(60));
        let fit = fit_version(&long);
        assert!(fit.len() <= MAX_VERSION && long.starts_with(&fit), "{fit}");
        assert!(fit.len() >= MAX_VERSION - 1);
        assert_eq!(fit_version("0.1.0 gpu:a\nb"), "0.1.0 gpu:a b");
        assert_eq!(fit_version("0.1.0 gpu:a\u{7}b"), "0.1.0 gpu:a b");
    }
}

/// Types and gRPC stubs generated from the .proto files.
pub mod v1 {
    #![allow(clippy::all, clippy::pedantic)]
    include!(concat!(env!("OUT_DIR"), "/nqueens.v1.rs"));

    /// The encoded descriptors of every message and service, for gRPC
    /// server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/nqueens_descriptor.bin"));
}
