//! The engine's account: the one notion every comparison of an actor or an
//! author with the engine goes through ([`EngineAccount::is`]).
//!
//! GitHub spells one account two ways. REST says `github-actions[bot]`
//! (`type: "Bot"`); GraphQL's `Bot.login` says `github-actions`, and only
//! `__typename: "Bot"` tells it from a person called `github-actions`. ward
//! keeps REST's spelling everywhere: the GraphQL reads ask every actor's
//! `__typename` and turn a bot's login into REST's at the boundary
//! ([`rest_login`]), so a login that reaches a rule is spelled one way, and
//! a person whose login is an app's name without `[bot]` is never taken for
//! the app. The account itself is what ward.yml's `engine_account` names:
//! the workflow token's `github-actions[bot]`, an app's bot
//! (`my-app[bot]`), or the user of a personal token (`rob`); logins are
//! compared as GitHub compares them, without regard to case.

use serde::{Deserialize, Serialize};

/// REST's suffix of a bot's login.
const BOT_SUFFIX: &str = "[bot]";

/// A login as REST spells it, from GraphQL's `__typename` and `login`: a
/// `Bot`'s login gets REST's `[bot]` (unless it has it already); any other
/// actor's is as given.
pub fn rest_login(typename: Option<&str>, login: String) -> String {
    if typename == Some("Bot") && !login.ends_with(BOT_SUFFIX) { format!("{login}{BOT_SUFFIX}") } else { login }
}

/// The login the engine acts as (`engine_account` in ward.yml), in REST's
/// spelling.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EngineAccount(String);

impl EngineAccount {
    pub fn new(login: impl Into<String>) -> Self {
        Self(login.into())
    }

    /// The login, as REST spells it (what ward writes as an author).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `login` (REST's spelling, as every read of the forge gives
    /// it) is the engine's account.
    pub fn is(&self, login: &str) -> bool {
        login.trim().eq_ignore_ascii_case(self.0.trim())
    }

    /// Whether the account is a bot (an app's, or the workflow token's).
    pub fn is_bot(&self) -> bool {
        self.0.trim().to_ascii_lowercase().ends_with(BOT_SUFFIX)
    }
}

impl AsRef<str> for EngineAccount {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<&str> for EngineAccount {
    fn from(login: &str) -> Self {
        Self::new(login)
    }
}

impl std::fmt::Display for EngineAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bots_graphql_login_is_spelled_as_rest_spells_it_and_a_persons_is_not() {
        assert_eq!(rest_login(Some("Bot"), "github-actions".into()), "github-actions[bot]");
        assert_eq!(rest_login(Some("Bot"), "my-app[bot]".into()), "my-app[bot]");
        assert_eq!(rest_login(Some("User"), "github-actions".into()), "github-actions");
        assert_eq!(rest_login(None, "rob".into()), "rob");
    }

    #[test]
    fn the_engine_is_its_login_in_any_case_and_nobody_else() {
        let app = EngineAccount::new("my-app[bot]");
        assert!(app.is("my-app[bot]") && app.is("My-App[bot]") && app.is(&rest_login(Some("Bot"), "my-app".into())));
        assert!(!app.is("my-app"), "a person named like the app is not the app");
        assert!(!app.is(&rest_login(Some("User"), "my-app".into())));
        let user = EngineAccount::new("rob");
        assert!(user.is("rob") && user.is(&rest_login(Some("User"), "Rob".into())) && !user.is("rob[bot]"));
        assert!(app.is_bot() && !user.is_bot());
    }
}
