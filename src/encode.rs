//! Text encodings the outputs share: a string as one percent-encoded URL
//! path segment (links on the pages, CloudEvents `source`, the CLI's
//! requests to a server), and as XML/HTML text (the pictures and pages).

/// `s` as one path segment: unreserved characters (RFC 3986) as they are,
/// every other byte percent-encoded.
pub fn path_segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `s` as XML content or attribute value (control characters XML 1.0
/// does not allow become U+FFFD).
pub fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// Free text (a message, a goal, a media type) as written in a trail
/// line: as it is, but with control and invisible characters escaped, so
/// no value can forge a line or drive the terminal.
pub fn text(s: &str) -> std::borrow::Cow<'_, str> {
    let visible =
        |c: char| c == ' ' || crate::rules::labels::plainly_visible(c.encode_utf8(&mut [0; 4]));
    if s.chars().all(visible) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            c if visible(c) => out.push(c),
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_and_xml() {
        assert_eq!(path_segment("a b/<c>~"), "a%20b%2F%3Cc%3E~");
        assert_eq!(path_segment("é"), "%C3%A9");
        assert_eq!(
            xml("<a href=\"x\">&'\u{1}"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;\u{FFFD}"
        );
    }
}
