//! Bearer tokens in the registry: issuing and revoking them (operator
//! operations), and finding the grant a presented token's hash carries.

use super::Engine;
use crate::auth::tokens::{self, IssueToken};
use crate::auth::Grant;
use crate::auth::Unauthenticated;
use crate::error::{LedgerError, Result};
use crate::model::TokenIssued;
use crate::views::TokenState;

impl Engine {
    /// Record a token's hash and what it grants. Decided on the whole
    /// registry: an id is issued once, whichever instance issued it.
    pub fn issue_token(&mut self, cmd: &IssueToken) -> Result<TokenIssued> {
        self.catch_up(&|_| {})?;
        let held = self.views.token(&cmd.sha256)?;
        let record = tokens::decide_issue(held.as_ref(), cmd, self.now_ms())?;
        let crate::model::LedgerEvent::TokenIssued(issued) = record.event.clone() else {
            return Err(LedgerError::Internal(
                "issue_token decided another kind of event",
            ));
        };
        self.commit(vec![record])?;
        Ok(issued)
    }

    /// Withdraw a token: from the moment each instance has projected the
    /// record (within its staleness bound), it refuses the token.
    pub fn revoke_token(&mut self, id: &str) -> Result<()> {
        self.catch_up(&|_| {})?;
        let held = match self.views.token_hash(id)? {
            Some(sha) => self.views.token(&sha)?,
            None => None,
        };
        let record = tokens::decide_revoke(held.as_ref(), id)?;
        self.commit(vec![record])?;
        Ok(())
    }

    /// Every token issued, revoked and expired ones too.
    pub fn tokens(&self) -> Result<Vec<TokenState>> {
        Ok(self.views.tokens()?)
    }

    /// The grant of the token whose SHA-256 is `sha256`, on views at most
    /// the staleness bound old (a token another instance issued a moment
    /// ago is looked for again on views caught up).
    pub fn authenticate(
        &mut self,
        sha256: &[u8; 32],
    ) -> Result<std::result::Result<Grant, Unauthenticated>> {
        let caught_up = self.refresh()?;
        let mut held = self.views.token(sha256)?;
        if held.is_none() && !caught_up {
            self.catch_up(&|_| {})?;
            held = self.views.token(sha256)?;
        }
        Ok(tokens::check(held.as_ref(), self.now_ms()))
    }
}
