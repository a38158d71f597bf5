//! The nqueens wire schema (`proto/nqueens/v1/*.proto`, package
//! `nqueens.v1`) and checked conversions between it and the core types
//! ([`convert`], re-exported here).
//!
//! Conversions *from* the wire never trust the sender: a subproblem is
//! re-derived from its id by the plan and must equal the payload sent.

pub mod client;
pub mod convert;

pub use convert::*;

/// Types and gRPC stubs generated from the .proto files.
pub mod v1 {
    #![allow(clippy::all, clippy::pedantic)]
    include!(concat!(env!("OUT_DIR"), "/nqueens.v1.rs"));

    /// The encoded descriptors of every message and service, for gRPC
    /// server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/nqueens_descriptor.bin"));
}
