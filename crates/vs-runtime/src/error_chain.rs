//! An error and its causes as one line, the way vibesys prints and
//! records failures.

use std::error::Error;

/// `e` and its causes in one line: `outer: inner: ...`.
pub(crate) fn one_line(e: &dyn Error) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        next = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    #[test]
    fn causes_follow_the_error() {
        let inner = std::io::Error::other("inner");
        let outer = crate::RuntimeError::Io {
            op: "read",
            path: "/x".into(),
            source: inner,
        };
        assert_eq!(super::one_line(&outer), "read /x: inner: inner");
    }
}
