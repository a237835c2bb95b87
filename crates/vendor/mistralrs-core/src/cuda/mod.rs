pub mod ffi;
pub mod gdn;
pub mod moe;
pub mod ssm;
