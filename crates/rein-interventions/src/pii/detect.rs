//! Finding personal data in text: one pattern per kind, then a check the pattern cannot express
//! (Luhn for cards, mod-97 for IBANs, number ranges for SSNs and IPs, digit counts for phones).

use std::borrow::Cow;
use std::fmt;
use std::net::Ipv6Addr;
use std::sync::LazyLock;

use regex::Regex;

/// A kind of personal data [`PiiDetector`] finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "policy", derive(serde::Deserialize, serde::Serialize))]
#[cfg_attr(feature = "policy", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum PiiKind {
    /// An e-mail address (`ann@example.com`).
    Email,
    /// A phone number: international (`+44 20 7946 0958`) or North American
    /// (`(415) 555-0132`, `415-555-0132`), 7 to 15 digits.
    Phone,
    /// A payment card number: 13 to 19 digits (spaces or dashes allowed) passing the Luhn check.
    CreditCard,
    /// An IBAN passing the ISO 13616 mod-97 check (`DE89 3704 0044 0532 0130 00`).
    Iban,
    /// A US social security number written `AAA-GG-SSSS`, with a valid area, group and serial.
    Ssn,
    /// An IPv4 address (each octet at most 255) or an IPv6 address.
    IpAddress,
    /// An API key or secret token of a well-known shape: OpenAI / Anthropic `sk-…`, AWS
    /// `AKIA…`, GitHub `ghp_…`, Slack `xox…-…`, Google `AIza…`, Stripe `sk_live_…`, JWTs and
    /// PEM private-key headers.
    ApiKey,
}

impl PiiKind {
    /// Every kind, in the order overlapping matches are preferred.
    pub const ALL: [PiiKind; 7] = [
        PiiKind::ApiKey,
        PiiKind::Email,
        PiiKind::Iban,
        PiiKind::CreditCard,
        PiiKind::Ssn,
        PiiKind::IpAddress,
        PiiKind::Phone,
    ];

    /// The kind's name in a policy file (`email`, `phone`, `credit_card`, `iban`, `ssn`,
    /// `ip_address`, `api_key`).
    pub fn name(self) -> &'static str {
        match self {
            PiiKind::Email => "email",
            PiiKind::Phone => "phone",
            PiiKind::CreditCard => "credit_card",
            PiiKind::Iban => "iban",
            PiiKind::Ssn => "ssn",
            PiiKind::IpAddress => "ip_address",
            PiiKind::ApiKey => "api_key",
        }
    }

    /// The typed placeholder a redaction writes (`[EMAIL]`, `[PHONE]`, `[CREDIT_CARD]`,
    /// `[IBAN]`, `[SSN]`, `[IP_ADDRESS]`, `[API_KEY]`).
    pub fn placeholder(self) -> &'static str {
        match self {
            PiiKind::Email => "[EMAIL]",
            PiiKind::Phone => "[PHONE]",
            PiiKind::CreditCard => "[CREDIT_CARD]",
            PiiKind::Iban => "[IBAN]",
            PiiKind::Ssn => "[SSN]",
            PiiKind::IpAddress => "[IP_ADDRESS]",
            PiiKind::ApiKey => "[API_KEY]",
        }
    }

    /// The kind named `name` (as [`name`](Self::name) writes it).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for PiiKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One piece of personal data found in a text: its kind and byte range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PiiMatch {
    /// What was found.
    pub kind: PiiKind,
    /// Byte offset of the first character.
    pub start: usize,
    /// Byte offset after the last character.
    pub end: usize,
}

struct Patterns {
    email: Regex,
    phone: Regex,
    card: Regex,
    iban: Regex,
    iban_head: Regex,
    ssn: Regex,
    ipv4: Regex,
    ipv6: Regex,
    api_key: Regex,
}

// The patterns are literals, tested below; compiled once per process.
#[allow(clippy::expect_used)]
static PATTERNS: LazyLock<Patterns> = LazyLock::new(|| {
    let re = |p: &str| Regex::new(p).expect("built-in PII pattern");
    Patterns {
        // Unicode letters are allowed (internationalized addresses), and `'` in the local part.
        email: re(
            r"\b[\p{L}\p{N}][\p{L}\p{N}._%+'-]*@[\p{L}\p{N}](?:[\p{L}\p{N}-]*[\p{L}\p{N}])?(?:\.[\p{L}\p{N}](?:[\p{L}\p{N}-]*[\p{L}\p{N}])?)*\.\p{L}{2,24}\b",
        ),
        // International (+CC then groups) or North American ((AAA) EEE-NNNN, AAA-EEE-NNNN,
        // AAA.EEE.NNNN). A bare run of digits is not a phone number here: too many order
        // numbers and ids look like one.
        phone: re(
            r"(?:\+\d{1,3}(?:[ .-]?\(?\d{1,4}\)?)(?:[ .-]?\d{2,4}){2,5}\b|(?:\(\d{3}\) ?|\b\d{3}[.-])\d{3}[.-]\d{4}\b)",
        ),
        card: re(r"\b\d(?:[ -]?\d){12,18}\b"),
        iban: re(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b"),
        iban_head: re(r"\b[A-Z]{2}\d{2} ?$"),
        ssn: re(r"\b(\d{3})-(\d{2})-(\d{4})\b"),
        ipv4: re(r"\b(?:\d{1,3}\.){3}\d{1,3}\b"),
        ipv6: re(r"(?i)(?:[0-9a-f]{0,4}:){2,7}[0-9a-f]{0,4}(?:%[0-9a-z]+)?"),
        api_key: re(concat!(
            r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}",
            r"|\bAKIA[0-9A-Z]{16}\b",
            r"|\bgh[pousr]_[A-Za-z0-9]{36,}\b",
            r"|\bxox[abprs]-[A-Za-z0-9-]{10,}",
            r"|\bAIza[0-9A-Za-z_-]{35}",
            r"|\b[rs]k_(?:live|test)_[0-9A-Za-z]{16,}",
            r"|\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
            r"|-----BEGIN (?:[A-Z]+ )?PRIVATE KEY-----",
        )),
    }
});

/// The Luhn check of a card number's digits.
fn luhn(digits: &[u8]) -> bool {
    let mut sum = 0u32;
    for (i, d) in digits.iter().rev().enumerate() {
        let mut d = u32::from(*d);
        if i % 2 == 1 {
            d *= 2;
            if d > 9 {
                d -= 9;
            }
        }
        sum += d;
    }
    sum.is_multiple_of(10)
}

fn digits(s: &str) -> Vec<u8> {
    s.bytes()
        .filter(u8::is_ascii_digit)
        .map(|b| b - b'0')
        .collect()
}

fn valid_card(s: &str) -> bool {
    let d = digits(s);
    // Real card numbers are not all one digit (`0000 0000 0000 0000` passes Luhn).
    (13..=19).contains(&d.len()) && luhn(&d) && d.iter().any(|x| *x != d[0])
}

/// ISO 13616: move the first four characters to the end, letters become 10..35, mod 97 is 1.
fn valid_iban(s: &str) -> bool {
    let compact: Vec<u8> = s.bytes().filter(|b| *b != b' ').collect();
    if !(15..=34).contains(&compact.len()) {
        return false;
    }
    let (head, tail) = compact.split_at(4);
    let mut rem = 0u32;
    for b in tail.iter().chain(head) {
        let v = match b {
            b'0'..=b'9' => u32::from(b - b'0'),
            b'A'..=b'Z' => u32::from(b - b'A') + 10,
            _ => return false,
        };
        rem = if v >= 10 {
            (rem * 100 + v) % 97
        } else {
            (rem * 10 + v) % 97
        };
    }
    rem == 1
}

/// Area 001–899 but 666, group 01–99, serial 0001–9999 (the SSA's rules since 2011).
fn valid_ssn(area: &str, group: &str, serial: &str) -> bool {
    area != "000" && area != "666" && !area.starts_with('9') && group != "00" && serial != "0000"
}

fn valid_ipv4(s: &str) -> bool {
    s.split('.').all(|o| {
        // A leading zero (`01`) is a version or a date, not an address.
        o.parse::<u16>().is_ok_and(|n| n <= 255) && (o.len() == 1 || !o.starts_with('0'))
    })
}

fn valid_ipv6(s: &str) -> bool {
    let addr = s.split('%').next().unwrap_or(s);
    // `::` alone or clock times (`10:30:00`) are not addresses; a real one has a `::` or 8 groups.
    addr.len() > 2 && addr.parse::<Ipv6Addr>().is_ok()
}

fn valid_phone(s: &str) -> bool {
    (7..=15).contains(&digits(s).len())
}

/// Finds personal data in text ([`PiiKind`]s), and redacts it with typed placeholders.
///
/// Each kind is a pattern plus a check (Luhn, mod-97, ranges); where matches overlap the one
/// that starts first wins, then the longer, then the kind earlier in [`PiiKind::ALL`]. The
/// measured precision and recall on the repository's labelled set are in `docs/policies.md`.
///
/// ```
/// use rein_interventions::pii::{PiiDetector, PiiKind};
///
/// let d = PiiDetector::new();
/// let text = "Mail ann@example.com, card 4111 1111 1111 1111, not 4111 1111 1111 1112.";
/// let kinds: Vec<PiiKind> = d.find(text).iter().map(|m| m.kind).collect();
/// assert_eq!(kinds, [PiiKind::Email, PiiKind::CreditCard]);
/// assert_eq!(
///     d.redact(text),
///     "Mail [EMAIL], card [CREDIT_CARD], not 4111 1111 1111 1112."
/// );
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PiiDetector {
    kinds: [bool; 7],
}

impl Default for PiiDetector {
    fn default() -> Self {
        Self::new()
    }
}

impl PiiDetector {
    /// A detector of every kind.
    pub fn new() -> Self {
        Self { kinds: [true; 7] }
    }

    /// A detector of these kinds only.
    pub fn only(kinds: impl IntoIterator<Item = PiiKind>) -> Self {
        let mut on = [false; 7];
        for k in kinds {
            on[k.index()] = true;
        }
        Self { kinds: on }
    }

    /// Whether this detector looks for `kind`.
    pub fn detects(&self, kind: PiiKind) -> bool {
        self.kinds[kind.index()]
    }

    /// The personal data in `text`, in order, not overlapping.
    pub fn find(&self, text: &str) -> Vec<PiiMatch> {
        let mut found = Vec::new();
        if text.len() < 7 {
            return found;
        }
        let p = &*PATTERNS;
        let mut add = |kind: PiiKind, re: &Regex, check: &dyn Fn(&str, usize, usize) -> bool| {
            if self.detects(kind) {
                for m in re.find_iter(text) {
                    if check(text, m.start(), m.end()) {
                        found.push(PiiMatch {
                            kind,
                            start: m.start(),
                            end: m.end(),
                        });
                    }
                }
            }
        };
        add(PiiKind::ApiKey, &p.api_key, &|_, _, _| true);
        add(PiiKind::Email, &p.email, &|_, _, _| true);
        add(PiiKind::Iban, &p.iban, &|t, s, e| valid_iban(&t[s..e]));
        add(PiiKind::CreditCard, &p.card, &|t, s, e| {
            // The digits of a mistyped IBAN may pass Luhn by chance (one in ten): not a card.
            valid_card(&t[s..e]) && !p.iban_head.is_match(&t[..s])
        });
        add(PiiKind::IpAddress, &p.ipv4, &|t, s, e| valid_ipv4(&t[s..e]));
        add(PiiKind::IpAddress, &p.ipv6, &|t, s, e| {
            // `std::vector` holds `d::`, a valid address: an address stands alone.
            let alone = !t[..s].ends_with(|c: char| c.is_alphanumeric() || c == ':')
                && !t[e..].starts_with(|c: char| c.is_alphanumeric() || c == ':');
            alone && valid_ipv6(&t[s..e])
        });
        add(PiiKind::Phone, &p.phone, &|t, s, e| valid_phone(&t[s..e]));
        if self.detects(PiiKind::Ssn) {
            for c in p.ssn.captures_iter(text) {
                if let (Some(m), Some(a), Some(g), Some(s)) = (c.get(0), c.get(1), c.get(2), c.get(3))
                    && valid_ssn(a.as_str(), g.as_str(), s.as_str())
                    // Part of a longer dashed code (`SKU 400-12-9876-XL`): not an SSN.
                    && !text[..m.start()].ends_with('-')
                    && !text[m.end()..].starts_with('-')
                {
                    found.push(PiiMatch {
                        kind: PiiKind::Ssn,
                        start: m.start(),
                        end: m.end(),
                    });
                }
            }
        }
        // Earliest first, then longest, then the preferred kind; drop what overlaps a kept one.
        let rank = |k: PiiKind| PiiKind::ALL.iter().position(|x| *x == k).unwrap_or(0);
        found.sort_by(|a, b| {
            a.start
                .cmp(&b.start)
                .then(b.end.cmp(&a.end))
                .then(rank(a.kind).cmp(&rank(b.kind)))
        });
        let mut kept: Vec<PiiMatch> = Vec::with_capacity(found.len());
        for m in found {
            if kept.last().is_none_or(|k| m.start >= k.end) {
                kept.push(m);
            }
        }
        kept
    }

    /// Whether `text` holds personal data.
    pub fn contains(&self, text: &str) -> bool {
        !self.find(text).is_empty()
    }

    /// `text` with each match replaced by its kind's placeholder (borrowed when nothing matched).
    pub fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        redact_matches(text, &self.find(text))
    }
}

/// `text` with `matches` (in order, not overlapping) replaced by their placeholders.
pub(crate) fn redact_matches<'t>(text: &'t str, matches: &[PiiMatch]) -> Cow<'t, str> {
    if matches.is_empty() {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for m in matches {
        out.push_str(&text[at..m.start]);
        out.push_str(m.kind.placeholder());
        at = m.end;
    }
    out.push_str(&text[at..]);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<(PiiKind, &str)> {
        PiiDetector::new()
            .find(text)
            .iter()
            .map(|m| (m.kind, &text[m.start..m.end]))
            .collect()
    }

    #[test]
    fn checksums_decide() {
        assert_eq!(
            kinds("card 4111-1111-1111-1111"),
            [(PiiKind::CreditCard, "4111-1111-1111-1111")]
        );
        assert!(kinds("card 4111-1111-1111-1112").is_empty());
        assert_eq!(
            kinds("iban GB82 WEST 1234 5698 7654 32."),
            [(PiiKind::Iban, "GB82 WEST 1234 5698 7654 32")]
        );
        assert!(kinds("iban GB82 WEST 1234 5698 7654 33.").is_empty());
        assert_eq!(kinds("ssn 123-45-6789"), [(PiiKind::Ssn, "123-45-6789")]);
        assert!(kinds("ssn 666-45-6789 or 123-00-6789").is_empty());
    }

    #[test]
    fn addresses_and_keys() {
        assert_eq!(
            kinds("from 192.168.0.1 and fe80::1ff:fe23:4567:890a"),
            [
                (PiiKind::IpAddress, "192.168.0.1"),
                (PiiKind::IpAddress, "fe80::1ff:fe23:4567:890a")
            ]
        );
        assert!(kinds("version 1.2.3.4000 at 10:30:00").is_empty());
        assert_eq!(
            kinds("key AKIAIOSFODNN7EXAMPLE"),
            [(PiiKind::ApiKey, "AKIAIOSFODNN7EXAMPLE")]
        );
        assert_eq!(
            kinds("call +44 20 7946 0958 or (415) 555-0132"),
            [
                (PiiKind::Phone, "+44 20 7946 0958"),
                (PiiKind::Phone, "(415) 555-0132")
            ]
        );
    }

    #[test]
    fn only_the_kinds_asked_for() {
        let d = PiiDetector::only([PiiKind::Email]);
        assert_eq!(
            d.redact("ann@example.com 123-45-6789"),
            "[EMAIL] 123-45-6789"
        );
        assert_eq!(PiiKind::from_name("credit_card"), Some(PiiKind::CreditCard));
        assert_eq!(PiiKind::from_name("nope"), None);
    }

    #[test]
    fn non_ascii_text_is_safe() {
        let d = PiiDetector::new();
        assert_eq!(
            d.redact("Grüße an jürgen@bücher.de ✓"),
            "Grüße an [EMAIL] ✓"
        );
        assert_eq!(d.redact("émile émile@example.fr"), "émile [EMAIL]");
    }
}
