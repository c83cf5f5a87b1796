//! Content types as the service compares them.

/// The media type of a content type: parameters dropped, trimmed, lower case.
pub fn media_type(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

pub fn is_json(content_type: &str) -> bool {
    media_type(content_type) == "application/json"
}
