//! Rein's hook registry: typed callbacks on the agent's lifecycle events, ordered, sync or
//! async, and plugins that bundle hooks and tools under a name.
//!
//! ```
//! use rein_core::{event::{BeforeToolCallEvent, Cancel}};
//! use rein_hooks::{HookOrder, HookRegistry};
//!
//! let mut hooks = HookRegistry::new();
//! // Cancel every call of the `rm` tool.
//! hooks.add(|ev: &mut BeforeToolCallEvent| {
//!     if ev.tool_use().name == "rm" {
//!         ev.cancel_tool = Cancel::Message("rm is not allowed".into());
//!     }
//! });
//! // Async callbacks return a boxed future that may borrow the event.
//! hooks.add_async_with(HookOrder::SDK_LAST, |ev: &mut BeforeToolCallEvent| {
//!     Box::pin(async move { let _ = ev.tool_use(); })
//! });
//! assert_eq!(hooks.count::<BeforeToolCallEvent>(), 2);
//! ```

mod plugin;
mod registry;

pub use plugin::{Plugin, PluginContext};
pub use registry::{HookEvent, HookOrder, HookRegistry, IntoHookResult};
