//! Glob-style patterns for KEYS, SCAN MATCH and CONFIG GET, with Redis's `stringmatchlen` rules.
//!
//! - `*` matches any run of bytes, `?` exactly one byte;
//! - `[abc]` one of the listed bytes, `[^abc]` any other byte, `[a-z]` a range (reversed ranges
//!   such as `[z-a]` are the same range), `\` inside brackets makes the next byte literal, and a
//!   `[` with no closing `]` takes the rest of the pattern as its list;
//! - `\x` outside brackets matches `x` literally (a trailing `\` matches a backslash).
//!
//! Matching is iterative, O(pattern × text) in the worst case and without recursion, so no
//! pattern from a client can blow the stack or take exponential time.

/// Whether `text` matches `pattern`, byte for byte.
pub fn matches(pattern: &[u8], text: &[u8]) -> bool {
    matches_with(pattern, text, false)
}

/// Whether `text` matches `pattern`, ignoring ASCII case (CONFIG GET does).
pub fn matches_ignoring_case(pattern: &[u8], text: &[u8]) -> bool {
    matches_with(pattern, text, true)
}

fn matches_with(pattern: &[u8], text: &[u8], ignore_case: bool) -> bool {
    let mut pattern_position = 0;
    let mut text_position = 0;
    // Where to resume after the last `*`: the pattern just past it and the text byte it would
    // swallow next. A later `*` always supersedes an earlier one, so one resume point suffices.
    let mut resume: Option<(usize, usize)> = None;
    loop {
        if pattern.get(pattern_position) == Some(&b'*') {
            while pattern.get(pattern_position) == Some(&b'*') {
                pattern_position += 1;
            }
            if pattern_position == pattern.len() {
                return true;
            }
            resume = Some((pattern_position, text_position));
            continue;
        }
        if text_position == text.len() {
            return pattern[pattern_position..].iter().all(|&byte| byte == b'*');
        }
        if pattern_position < pattern.len()
            && let Some(next) =
                match_one(pattern, pattern_position, text[text_position], ignore_case)
        {
            pattern_position = next;
            text_position += 1;
            continue;
        }
        match resume {
            Some((after_star, swallowed)) => {
                pattern_position = after_star;
                text_position = swallowed + 1;
                resume = Some((after_star, swallowed + 1));
            }
            None => return false,
        }
    }
}

/// Matches one byte against the pattern element at `position` (not `*`); returns the position
/// after that element when it matches.
fn match_one(pattern: &[u8], position: usize, byte: u8, ignore_case: bool) -> Option<usize> {
    let same = |a: u8, b: u8| if ignore_case { a.eq_ignore_ascii_case(&b) } else { a == b };
    match pattern[position] {
        b'?' => Some(position + 1),
        b'\\' if position + 1 < pattern.len() => {
            same(pattern[position + 1], byte).then_some(position + 2)
        }
        b'[' => {
            let mut cursor = position + 1;
            let negated = pattern.get(cursor) == Some(&b'^');
            if negated {
                cursor += 1;
            }
            let mut found = false;
            loop {
                match pattern.get(cursor) {
                    // An unclosed class takes the rest of the pattern, as Redis does.
                    None => break,
                    Some(b']') => {
                        cursor += 1;
                        break;
                    }
                    Some(b'\\') if cursor + 1 < pattern.len() => {
                        found |= same(pattern[cursor + 1], byte);
                        cursor += 2;
                    }
                    Some(&low)
                        if pattern.get(cursor + 1) == Some(&b'-') && cursor + 2 < pattern.len() =>
                    {
                        let high = pattern[cursor + 2];
                        let (mut low, mut high, mut byte) = (low.min(high), low.max(high), byte);
                        if ignore_case {
                            low = low.to_ascii_lowercase();
                            high = high.to_ascii_lowercase();
                            byte = byte.to_ascii_lowercase();
                        }
                        found |= (low..=high).contains(&byte);
                        cursor += 3;
                    }
                    Some(&listed) => {
                        found |= same(listed, byte);
                        cursor += 1;
                    }
                }
            }
            (found != negated).then_some(cursor)
        }
        literal => same(literal, byte).then_some(position + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check(pattern: &str, text: &str) -> bool {
        matches(pattern.as_bytes(), text.as_bytes())
    }

    #[test]
    fn stars_and_question_marks() {
        assert!(check("*", ""));
        assert!(check("*", "anything"));
        assert!(check("h?llo", "hello"));
        assert!(!check("h?llo", "hllo"));
        assert!(check("h*llo", "hllo"));
        assert!(check("h*llo", "heeeello"));
        assert!(check("user:*:name", "user:42:name"));
        assert!(!check("user:*:name", "user:42:names"));
        assert!(check("**a**", "xxaxx"));
        assert!(check("*a*b", "aaab"));
        assert!(!check("*a*b", "aaa"));
        assert!(check("", ""));
        assert!(!check("", "a"));
        assert!(!check("a", ""));
    }

    #[test]
    fn classes() {
        assert!(check("h[ae]llo", "hello"));
        assert!(check("h[ae]llo", "hallo"));
        assert!(!check("h[ae]llo", "hillo"));
        assert!(check("h[^e]llo", "hallo"));
        assert!(!check("h[^e]llo", "hello"));
        assert!(check("h[a-b]llo", "hbllo"));
        assert!(check("h[b-a]llo", "hallo"), "reversed ranges are ranges");
        assert!(!check("h[a-b]llo", "hcllo"));
        assert!(check("[\\]]", "]"));
        assert!(!check("[a-]", "-"), "as in Redis, `a-]` is the range a..=] and leaves [ unclosed");
        assert!(check("[a-]", "_"));
        assert!(check("[-a]", "-"), "a leading dash is literal");
        assert!(!check("[]", "a"), "an empty class matches nothing");
        assert!(check("[^]", "a"));
        assert!(check("a[bc", "ab"), "an unclosed class takes the rest of the pattern");
        assert!(check("a[bc", "ac"));
        assert!(!check("a[bc", "abc"));
    }

    #[test]
    fn escapes() {
        assert!(check("\\*", "*"));
        assert!(!check("\\*", "a"));
        assert!(check("a\\?", "a?"));
        assert!(!check("a\\?", "ab"));
        assert!(check("a\\", "a\\"), "a trailing backslash is literal");
        assert!(check("\\[x]", "[x]"));
    }

    #[test]
    fn ignoring_case() {
        assert!(matches_ignoring_case(b"APPEND*", b"appendonly"));
        assert!(matches_ignoring_case(b"[A-C]x", b"bX"));
        assert!(!matches(b"APPEND*", b"appendonly"));
    }

    #[test]
    fn a_hostile_pattern_is_fast() {
        let pattern = "*a".repeat(50) + "b";
        let text = "a".repeat(10_000);
        let started = std::time::Instant::now();
        assert!(!check(&pattern, &text));
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
    }

    /// A direct recursive reading of the rules, slow but obviously right, to compare against.
    fn reference(pattern: &[u8], text: &[u8]) -> bool {
        match pattern.first() {
            None => text.is_empty(),
            Some(b'*') => (0..=text.len()).any(|skip| reference(&pattern[1..], &text[skip..])),
            Some(_) => match text.first() {
                None => false,
                Some(&byte) => match match_one(pattern, 0, byte, false) {
                    Some(next) => reference(&pattern[next..], &text[1..]),
                    None => false,
                },
            },
        }
    }

    proptest! {
        #[test]
        fn agrees_with_the_recursive_reference(
            pattern in proptest::collection::vec(prop::sample::select(b"ab*?[]^-\\".to_vec()), 0..10),
            text in proptest::collection::vec(prop::sample::select(b"ab-]*".to_vec()), 0..10),
        ) {
            prop_assert_eq!(matches(&pattern, &text), reference(&pattern, &text));
        }

        #[test]
        fn a_literal_pattern_matches_itself(text in proptest::collection::vec(b'a'..=b'z', 0..20)) {
            prop_assert!(matches(&text, &text));
        }
    }
}
