//! Request ids as vLLM spells them (`cmpl-<16 hex>-0-<8 hex>` in vLLM 0.34), keyed so the
//! core counts them at close to the speed of numbers.
//!
//! A `String` id costs the core several byte comparisons per report in its ordered map
//! (ids share their `cmpl-` prefix) and an allocation per countdown opened or id emitted.
//! A [`RequestName`] takes its hash once, when it is made — as a Python `str` caches its
//! hash, on which vLLM's dict-based aggregator relies — so a [`crate::HashedAggregator`]
//! finds a report's countdown by one probe and one comparison of texts, and its text is
//! shared, so keeping or emitting it copies a pointer. The text's length lives with the
//! text, behind that one pointer, so a name is 16 bytes, not `Arc<str>`'s 24: the
//! caller's set nodes hold a third less, the core's table slots a seventh (56 to 48 bytes
//! with their entry), which measured 8% more reports a second (docs/benchmarks.md).
//! Keeping short texts inline instead (no pointer to follow on that comparison) measured
//! slower: 64-byte ids.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use triomphe::ThinArc;
use xxhash_rust::xxh3::xxh3_64;

/// A request id: its text, shared, and the text's 64-bit hash (xxh3, unseeded, so the
/// order of names — and with it the order of every emitted set — is the same in every run
/// and on every machine).
///
/// Names order by hash, then by text: a total order consistent with equality, though not
/// the alphabetical one. Names of one text are equal whether or not they share it.
#[derive(Clone)]
pub struct RequestName {
    hash: u64,
    text: ThinArc<(), u8>,
}

impl RequestName {
    pub fn new(text: &str) -> Self {
        RequestName {
            hash: xxh3_64(text.as_bytes()),
            text: text_of(text),
        }
    }

    pub fn as_str(&self) -> &str {
        // Only `new` makes the bytes, from a `str`.
        std::str::from_utf8(&self.text.slice).expect("a name's bytes are its str's")
    }
}

/// Checked once, here: the name's size is what its sets and tables are sized by.
const _: () = assert!(std::mem::size_of::<RequestName>() == 16);

/// `text`'s bytes, shared, with their length.
fn text_of(text: &str) -> ThinArc<(), u8> {
    ThinArc::from_header_and_slice((), text.as_bytes())
}

impl From<&str> for RequestName {
    fn from(text: &str) -> Self {
        RequestName::new(text)
    }
}

impl PartialEq for RequestName {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && same_text(&self.text.slice, &other.text.slice)
    }
}

/// Whether two texts are equal. Texts of 16 to 32 bytes — vLLM's ids are 32 — are
/// compared inline as their first and last 16 bytes (overlapping when shorter than 32):
/// the C library's `memcmp`, which `==` on bytes calls, cost about twice the
/// instructions for them.
fn same_text(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let block = |chunk: Option<&[u8; 16]>| chunk.map(|bytes| u128::from_ne_bytes(*bytes));
    if (16..=32).contains(&a.len()) {
        return block(a.first_chunk()) == block(b.first_chunk())
            && block(a.last_chunk()) == block(b.last_chunk());
    }
    a == b
}

impl Eq for RequestName {}

impl Ord for RequestName {
    fn cmp(&self, other: &Self) -> Ordering {
        self.hash
            .cmp(&other.hash)
            .then_with(|| self.text.slice.cmp(&other.text.slice))
    }
}

impl PartialOrd for RequestName {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Hash for RequestName {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl fmt::Debug for RequestName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for RequestName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Equality and order must rest on the text: a hash only says where to look. Names
    /// are built here with hashes chosen to collide, which xxh3 would not give on demand.
    fn check(eq: fn(&RequestName, &RequestName) -> bool) -> Result<(), String> {
        let named = |hash, text: &str| RequestName {
            hash,
            text: text_of(text),
        };
        let (a, b) = (named(7, "cmpl-a-0"), named(7, "cmpl-b-0"));
        if eq(&a, &b) {
            return Err("two texts with one hash are one name".into());
        }
        if !eq(&a, &named(7, "cmpl-a-0")) {
            return Err("one text in two allocations is two names".into());
        }
        if a.cmp(&b) != Ordering::Less || b.cmp(&a) != Ordering::Greater {
            return Err("names of one hash are not ordered by their text".into());
        }
        Ok(())
    }

    /// Every text of 0 to 40 bytes against its copy and against each of its one-byte
    /// changes: the inline comparison of 16 to 32 bytes must see a change anywhere, in
    /// the overlap of its two blocks too.
    fn check_texts(same: fn(&[u8], &[u8]) -> bool) -> Result<(), String> {
        for len in 0..=40usize {
            let text: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            if !same(&text, &text.clone()) {
                return Err(format!("a text of {len} bytes differs from its copy"));
            }
            if len > 0 && same(&text, &text[..len - 1]) {
                return Err(format!("a text of {len} bytes equals its prefix"));
            }
            for at in 0..len {
                let mut changed = text.clone();
                changed[at] ^= 1;
                if same(&text, &changed) {
                    return Err(format!("{len} bytes, byte {at} changed: still equal"));
                }
            }
        }
        Ok(())
    }

    #[test]
    fn texts_differ_wherever_one_byte_does_and_a_first_block_check_is_caught() {
        assert_eq!(check_texts(same_text), Ok(()));
        assert!(
            check_texts(|a, b| a.len() == b.len() && a.iter().take(16).eq(b.iter().take(16)))
                .is_err()
        );
    }

    #[test]
    fn names_are_equal_by_text_and_a_hash_only_check_is_caught() {
        assert_eq!(check(|a, b| a == b), Ok(()));
        assert!(check(|a, b| a.hash == b.hash).is_err());
        let name = RequestName::from("cmpl-0123456789abcdef-0-89abcdef");
        assert_eq!(name.as_str(), "cmpl-0123456789abcdef-0-89abcdef");
        assert_eq!(
            format!("{name} {name:?}"),
            format!("{0} {0:?}", name.as_str())
        );
        assert_eq!(name, RequestName::new(name.as_str()));
    }
}
