//! Builds nothing. It exists for its build-dependency (Cargo.toml): mistral.rs's server,
//! which the server-judge tests build into the same target directory, runs a build
//! script that asks for memchr's default features on the host, and cargo resolves host
//! features for the whole build; with the same request here, the proc macros under
//! mistralrs-core (and so mistralrs-core itself) compile once for jury and the server.
fn main() {}
