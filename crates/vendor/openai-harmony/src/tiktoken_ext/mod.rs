mod public_encodings;
pub use public_encodings::{set_tiktoken_base_url, Encoding};
