//! Stream paths as subscriptions see them: normalisation and glob patterns.
//!
//! Owns [`normalise_path`] (a path is stored and compared without leading or
//! trailing `/`) and [`glob_match`] (`*` one `/`-separated segment, `**` any
//! number of segments, the empty run included). Both are pure.

/// A stream path without leading or trailing `/`.
pub fn normalise_path(path: &str) -> String {
    path.trim_matches('/').to_string()
}

/// Glob match over `/`-separated segments: `*` one segment, `**` any number.
pub fn glob_match(pattern: &str, path: &str) -> bool {
    fn go(p: &[&str], s: &[&str]) -> bool {
        match p.split_first() {
            None => s.is_empty(),
            Some((&"**", rest)) => (0..=s.len()).any(|i| go(rest, &s[i..])),
            Some((first, rest)) => match s.split_first() {
                Some((seg, tail)) => (*first == "*" || first == seg) && go(rest, tail),
                None => false,
            },
        }
    }
    let p: Vec<&str> = pattern.trim_matches('/').split('/').collect();
    let s: Vec<&str> = path.trim_matches('/').split('/').collect();
    go(&p, &s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("events/*", "events/a"));
        assert!(!glob_match("events/*", "events/a/b"));
        assert!(glob_match("events/**", "events/a/b"));
        assert!(glob_match("events/**", "events"));
        assert!(!glob_match("events/*", "other/a"));
        assert!(glob_match("*", "x"));
    }

    #[test]
    fn paths_lose_their_outer_slashes() {
        assert_eq!(normalise_path("/a/b/"), "a/b");
        assert_eq!(normalise_path("a"), "a");
        assert_eq!(normalise_path("//"), "");
    }
}
