//! The one error type of vs-pin.

/// A digest that does not parse, or a found image that does not match its
/// pin. Deliberately exhaustive: vs-image maps each variant to its own.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A string is not a valid `sha256:<64 hex>` digest.
    #[error("invalid digest {value:?}: expected sha256:<64 lowercase hex digits>")]
    InvalidDigest {
        /// The offending string (at most 100 characters of it).
        value: String,
    },
    /// A found image does not match its pin.
    #[error("image {image}: {field} {found} does not match the pinned {pinned}")]
    PinMismatch {
        /// The image name.
        image: String,
        /// The compared field (`image id`, `config digest`, `layer 2`, ...).
        field: String,
        /// The pinned value.
        pinned: String,
        /// The found value.
        found: String,
    },
}
