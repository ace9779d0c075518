//! Resource subscriptions (`McpClient::subscribe`, `unsubscribe`, `resource_updates`): the
//! server's `notifications/resources/updated` for the URIs the application subscribed to, and
//! `notifications/resources/list_changed`, delivered to a reader the application takes.
//!
//! Bounded by construction: an update only says *that* a resource changed (the reader reads
//! it again), so an update already waiting stands for any later one of the same kind. At most
//! one update per subscribed URI and one list change wait, whatever the server sends; an
//! update of a URI nobody subscribed to is dropped.

use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

use crate::{McpClient, McpError};

/// What changed on the server, as [`McpResourceUpdates::next`] tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum McpResourceUpdate {
    /// The subscribed resource `uri` changed (maybe more than once since the last update
    /// read): read it again with [`McpClient::read_resource`].
    Updated {
        /// The resource.
        uri: String,
    },
    /// The server's list of resources changed: list it again with [`McpClient::resources`].
    ListChanged,
}

/// What the handler of a connection's notifications shares with its readers.
#[derive(Default)]
pub(crate) struct Updates {
    state: Mutex<State>,
    ready: Notify,
}

#[derive(Default)]
struct State {
    subscribed: HashSet<String>,
    /// Unread, in arrival order, none twice.
    pending: VecDeque<McpResourceUpdate>,
    closed: bool,
}

impl Updates {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `notifications/resources/updated` for `uri`: kept if subscribed and not already
    /// waiting.
    pub(crate) fn updated(&self, uri: String) {
        let subscribed = self.state().subscribed.contains(&uri);
        if subscribed {
            self.push(McpResourceUpdate::Updated { uri });
        }
    }

    /// `notifications/resources/list_changed`.
    pub(crate) fn list_changed(&self) {
        self.push(McpResourceUpdate::ListChanged);
    }

    fn push(&self, update: McpResourceUpdate) {
        let mut state = self.state();
        if state.closed || state.pending.contains(&update) {
            return;
        }
        state.pending.push_back(update);
        drop(state);
        self.ready.notify_one();
    }

    /// The connection closed: readers get what waits, then `None`.
    pub(crate) fn close(&self) {
        self.state().closed = true;
        self.ready.notify_waiters();
        self.ready.notify_one();
    }

    /// Updates of `uri` are kept from now on; whether it was not subscribed yet.
    fn subscribe(&self, uri: &str) -> bool {
        self.state().subscribed.insert(uri.to_owned())
    }

    /// Updates of `uri` are dropped from now on, and the one waiting, if any.
    fn unsubscribe(&self, uri: &str) {
        let mut state = self.state();
        state.subscribed.remove(uri);
        state
            .pending
            .retain(|u| !matches!(u, McpResourceUpdate::Updated { uri: u } if u == uri));
    }
}

/// The server's resource updates, read one by one ([`McpClient::resource_updates`]).
///
/// Every reader of one connection reads the same queue: an update goes to one of them.
pub struct McpResourceUpdates {
    updates: Arc<Updates>,
}

impl fmt::Debug for McpResourceUpdates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpResourceUpdates").finish_non_exhaustive()
    }
}

impl McpResourceUpdates {
    /// The next update, waiting for one; `None` once the connection has ended (the client
    /// [closed](McpClient::close), its last clone dropped, or the server gone) and nothing
    /// waits.
    pub async fn next(&mut self) -> Option<McpResourceUpdate> {
        loop {
            let ready = self.updates.ready.notified();
            {
                let mut state = self.updates.state();
                if let Some(update) = state.pending.pop_front() {
                    return Some(update);
                }
                if state.closed {
                    return None;
                }
            }
            ready.await;
        }
    }

    /// The next update if one waits, without waiting.
    pub fn try_next(&mut self) -> Option<McpResourceUpdate> {
        self.updates.state().pending.pop_front()
    }
}

impl McpClient {
    /// Subscribes to the resource `uri` (`resources/subscribe`): the server's updates of it
    /// reach [`resource_updates`](Self::resource_updates). Only when the server declares the
    /// `resources.subscribe` capability, else [`McpError::Unsupported`]; subscribing twice
    /// sends one request.
    pub async fn subscribe(&self, uri: &str) -> Result<(), McpError> {
        self.check_subscriptions()?;
        // Kept before the request: the server may send an update before it answers.
        if !self.inner.updates.subscribe(uri) {
            return Ok(());
        }
        let params = rmcp::model::SubscribeRequestParams::new(uri);
        // Deprecated only for protocol 2026-07-28, which `check_subscriptions` refused.
        #[allow(deprecated)]
        let subscribed = self
            .bounded("resources/subscribe", self.inner.peer.subscribe(params))
            .await;
        if subscribed.is_err() {
            self.inner.updates.unsubscribe(uri);
        }
        subscribed
    }

    /// Unsubscribes from the resource `uri` (`resources/unsubscribe`): its updates, and the
    /// one waiting unread, are dropped from now on, even if the request fails.
    pub async fn unsubscribe(&self, uri: &str) -> Result<(), McpError> {
        self.check_subscriptions()?;
        self.inner.updates.unsubscribe(uri);
        let params = rmcp::model::UnsubscribeRequestParams::new(uri);
        #[allow(deprecated)]
        self.bounded("resources/unsubscribe", self.inner.peer.unsubscribe(params))
            .await
    }

    /// The server's updates of the resources subscribed to ([`subscribe`](Self::subscribe))
    /// and the changes of its resource list, as they come. Nothing is lost before this is
    /// called, and nothing piles up: at most one update per subscribed resource and one list
    /// change wait unread.
    ///
    /// ```no_run
    /// # async fn run(client: rein_mcp::McpClient) -> Result<(), rein_mcp::McpError> {
    /// use rein_mcp::McpResourceUpdate;
    /// let mut updates = client.resource_updates();
    /// client.subscribe("file:///notes/today.md").await?;
    /// while let Some(update) = updates.next().await {
    ///     if let McpResourceUpdate::Updated { uri } = update {
    ///         let parts = client.read_resource(&uri).await?;
    /// #       let _ = parts;
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn resource_updates(&self) -> McpResourceUpdates {
        McpResourceUpdates {
            updates: self.inner.updates.clone(),
        }
    }

    /// Whether subscriptions can be asked for: the server declared them, and the protocol is
    /// one where `resources/subscribe` exists (before 2026-07-28, which replaced it with
    /// `subscriptions/listen`, not supported yet).
    fn check_subscriptions(&self) -> Result<(), McpError> {
        let info = self.inner.peer.peer_info();
        let declared = info
            .as_ref()
            .and_then(|i| i.capabilities.resources.as_ref())
            .and_then(|r| r.subscribe)
            == Some(true);
        if !declared {
            return Err(
                self.unsupported("the server does not offer resource subscriptions".to_owned())
            );
        }
        if info
            .as_ref()
            .is_some_and(|i| i.protocol_version >= rmcp::model::ProtocolVersion::V_2026_07_28)
        {
            return Err(self.unsupported(
                "resource subscriptions on protocol 2026-07-28 (subscriptions/listen) are not \
                 supported yet"
                    .to_owned(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(updates: &Arc<Updates>) -> McpResourceUpdates {
        McpResourceUpdates {
            updates: updates.clone(),
        }
    }

    /// A flood of updates leaves one per subscribed resource and one list change; an update
    /// of a resource nobody subscribed to is dropped; unsubscribing drops the one waiting.
    #[test]
    fn updates_are_bounded_by_the_subscriptions() {
        let updates = Arc::new(Updates::default());
        assert!(updates.subscribe("a://1"));
        assert!(!updates.subscribe("a://1"));
        updates.subscribe("a://2");
        for _ in 0..10_000 {
            updates.updated("a://1".into());
            updates.updated("a://2".into());
            updates.updated("a://made-up".into());
            updates.list_changed();
        }
        let mut r = reader(&updates);
        let uri = |u: &str| McpResourceUpdate::Updated { uri: u.into() };
        assert_eq!(r.try_next(), Some(uri("a://1")));
        updates.unsubscribe("a://2");
        assert_eq!(r.try_next(), Some(McpResourceUpdate::ListChanged));
        assert_eq!(r.try_next(), None);
        updates.updated("a://2".into());
        updates.updated("a://1".into());
        assert_eq!(r.try_next(), Some(uri("a://1")));
        assert_eq!(r.try_next(), None);
    }

    /// A reader waits for the next update; after the close it gets what waits, then `None`.
    #[tokio::test]
    async fn a_reader_waits_and_ends_with_the_connection() {
        let updates = Arc::new(Updates::default());
        updates.subscribe("a://1");
        let mut r = reader(&updates);
        let waiting = tokio::spawn(async move {
            let first = r.next().await;
            let second = r.next().await;
            let end = r.next().await;
            (first, second, end)
        });
        tokio::task::yield_now().await;
        updates.updated("a://1".into());
        updates.list_changed();
        updates.close();
        updates.updated("a://1".into());
        let (first, second, end) = waiting.await.unwrap();
        assert_eq!(
            first,
            Some(McpResourceUpdate::Updated {
                uri: "a://1".into()
            })
        );
        assert_eq!(second, Some(McpResourceUpdate::ListChanged));
        assert_eq!(end, None);
    }
}
