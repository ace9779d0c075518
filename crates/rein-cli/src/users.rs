//! `rein serve --users FILE`: who each bearer token is. The file holds the SHA-256 of each
//! token, never the token: a leaked file lets nobody in (the tokens are random and long, so an
//! unsalted hash cannot be guessed back — GitHub keeps its tokens the same way).
//!
//! ```toml
//! [[user]]
//! name = "alice"
//! token_sha256 = "<64 hex digits: printf %s "$TOKEN" | sha256sum>"
//! ```

use std::path::Path;

use rein_agui::Principal;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The longest user name accepted (it is shown in the console and recorded with approvals).
const MAX_NAME: usize = 128;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    user: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    token_sha256: String,
}

/// The users of a `--users` file.
pub(crate) struct Users {
    /// Each user's name and the SHA-256 of their token.
    users: Vec<(Principal, [u8; 32])>,
}

impl Users {
    /// Reads and checks the file; the error names the file and what is wrong in it.
    pub(crate) fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read --users {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("--users {}: {e}", path.display()))
    }

    fn parse(text: &str) -> Result<Self, String> {
        let file: File = toml::from_str(text).map_err(|e| e.message().to_owned())?;
        if file.user.is_empty() {
            return Err("no [[user]] in the file: nobody could sign in".into());
        }
        let mut users: Vec<(Principal, [u8; 32])> = Vec::with_capacity(file.user.len());
        for (i, entry) in file.user.into_iter().enumerate() {
            let name = entry.name.trim();
            if name.is_empty() || name.len() > MAX_NAME || name.chars().any(char::is_control) {
                return Err(format!(
                    "user[{i}].name must be 1 to {MAX_NAME} bytes without control characters"
                ));
            }
            let hash = hex32(&entry.token_sha256).ok_or_else(|| {
                format!("user[{i}].token_sha256 must be 64 hex digits (the SHA-256 of the token)")
            })?;
            if users.iter().any(|(p, _)| p.id() == name) {
                return Err(format!("user[{i}]: `{name}` is named twice"));
            }
            if users.iter().any(|(_, h)| *h == hash) {
                return Err(format!("user[{i}]: the same token is given to two users"));
            }
            users.push((Principal::new(name), hash));
        }
        Ok(Self { users })
    }

    /// The user whose token this is. Every entry is compared, in constant time each.
    pub(crate) fn principal(&self, token: &str) -> Option<Principal> {
        let presented: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for (principal, hash) in &self.users {
            if bool::from(hash.ct_eq(&presented)) {
                found = Some(principal.clone());
            }
        }
        found
    }
}

fn hex32(text: &str) -> Option<[u8; 32]> {
    let text = text.trim();
    if text.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn sha(token: &str) -> String {
        Sha256::digest(token.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    #[test]
    fn each_token_is_its_users_and_no_other() {
        let file = format!(
            "[[user]]\nname = \"alice\"\ntoken_sha256 = \"{}\"\n[[user]]\nname = \"bob\"\ntoken_sha256 = \"{}\"\n",
            sha("alice-token-0123456789"),
            sha("bob-token-0123456789").to_uppercase()
        );
        let users = Users::parse(&file).unwrap();
        assert_eq!(
            users.principal("alice-token-0123456789").unwrap().id(),
            "alice"
        );
        assert_eq!(users.principal("bob-token-0123456789").unwrap().id(), "bob");
        assert!(users.principal("alice-token-012345678").is_none());
        assert!(users.principal("").is_none());
        // The hash itself is no token.
        assert!(users.principal(&sha("alice-token-0123456789")).is_none());
    }

    #[test]
    fn a_bad_file_is_refused_with_what_is_wrong() {
        let err = |text: &str| Users::parse(text).err().unwrap();
        let h = sha("x-token-0123456789");
        assert!(err("").contains("user"));
        assert!(err("user = []").contains("nobody"));
        assert!(err(&format!("[[user]]\nname = \"a\"\ntoken = \"{h}\"")).contains("token"));
        assert!(err("[[user]]\nname = \"a\"\ntoken_sha256 = \"abc\"").contains("64 hex"));
        assert!(err(&format!("[[user]]\nname = \" \"\ntoken_sha256 = \"{h}\"")).contains("name"));
        let twice = format!(
            "[[user]]\nname = \"a\"\ntoken_sha256 = \"{h}\"\n[[user]]\nname = \"b\"\ntoken_sha256 = \"{h}\""
        );
        assert!(err(&twice).contains("two users"));
        let named_twice = format!(
            "[[user]]\nname = \"a\"\ntoken_sha256 = \"{h}\"\n[[user]]\nname = \"a\"\ntoken_sha256 = \"{}\"",
            sha("y")
        );
        assert!(err(&named_twice).contains("named twice"));
    }
}
