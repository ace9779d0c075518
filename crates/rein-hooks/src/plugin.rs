//! Plugins: named bundles of hooks and tools.

use rein_core::{Error, ToolHandle};

use crate::HookRegistry;

/// A named bundle of hooks and tools. Names are unique per registry (and so per agent).
///
/// ```
/// use rein_core::event::MessageAddedEvent;
/// use rein_hooks::{HookRegistry, Plugin, PluginContext};
///
/// struct Logger;
/// impl Plugin for Logger {
///     fn name(&self) -> &str { "logger" }
///     fn register(&self, cx: &mut PluginContext<'_>) {
///         cx.hooks().add(|ev: &mut MessageAddedEvent| println!("{:?}", ev.message().role));
///     }
/// }
///
/// let mut hooks = HookRegistry::new();
/// hooks.add_plugin(&Logger).unwrap();
/// assert!(hooks.add_plugin(&Logger).is_err(), "duplicate plugin name");
/// ```
pub trait Plugin: Send + Sync {
    /// The plugin's unique name.
    fn name(&self) -> &str;

    /// Registers the plugin's hooks and tools.
    fn register(&self, cx: &mut PluginContext<'_>);
}

/// What a plugin registers into.
pub struct PluginContext<'a> {
    registry: &'a mut HookRegistry,
}

impl PluginContext<'_> {
    /// The hook registry.
    pub fn hooks(&mut self) -> &mut HookRegistry {
        self.registry
    }

    /// Contributes a tool.
    pub fn add_tool(&mut self, tool: ToolHandle) {
        self.registry.push_tool(tool);
    }
}

impl HookRegistry {
    /// Registers a plugin. A second plugin with the same name is an error.
    pub fn add_plugin(&mut self, plugin: &dyn Plugin) -> Result<&mut Self, Error> {
        self.add_plugin_name(plugin.name())?;
        plugin.register(&mut PluginContext { registry: self });
        Ok(self)
    }
}
