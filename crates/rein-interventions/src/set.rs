//! [`EventSet`]: the events a handler subscribes to.

use std::fmt;
use std::ops::BitOr;

use rein_core::audit::EventKind;

use crate::list::for_each_intervention_event;

/// The set of lifecycle events a handler subscribes to, decided once when the registry is built.
///
/// A handler is called only on the events of its set: an event no handler subscribes to gets no
/// bridge callback at all, and a handler outside the set of an event costs nothing there.
/// (`before_invocation` also runs for input injected mid-run.)
///
/// ```
/// use rein_interventions::EventSet;
/// let set = EventSet::BEFORE_TOOL_CALL | EventSet::AFTER_TOOL_CALL;
/// assert!(set.contains(EventSet::BEFORE_TOOL_CALL));
/// assert!(!set.contains(EventSet::BEFORE_MODEL_CALL));
/// assert!(EventSet::ALL.contains(set));
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct EventSet(u8);

macro_rules! event_set {
    ($(($method:ident, $async_builder:ident, $event:ident, $action:ident, $set:ident, $kind:ident)),* $(,)?) => {
        /// The position of each event in the list: its bit in an [`EventSet`].
        #[allow(non_camel_case_types)]
        enum Position {
            $($method,)*
        }

        /// How many intervention events there are.
        pub(crate) const EVENT_COUNT: usize = [$(Position::$method),*].len();

        impl EventSet {
            $(
                #[doc = concat!("`", stringify!($method), "`.")]
                pub const $set: Self = Self(1 << Position::$method as u8);
            )*

            /// All the intervention events.
            pub const ALL: Self = Self(0 $(| Self::$set.0)*);

            /// The set holding only `kind` (empty for events handlers are not called on).
            pub const fn of(kind: EventKind) -> Self {
                match kind {
                    $(EventKind::$kind => Self::$set,)*
                    _ => Self::NONE,
                }
            }

            /// The intervention events, in order.
            const KINDS: [EventKind; EVENT_COUNT] = [$(EventKind::$kind),*];
        }
    };
}

for_each_intervention_event!(event_set);

impl EventSet {
    /// No event.
    pub const NONE: Self = Self(0);

    /// What a handler subscribes to unless it says otherwise: every event but
    /// [`MODEL_OUTPUT`](Self::MODEL_OUTPUT) (a stream guard holds text back, so it is opt-in).
    pub const DEFAULT: Self = Self(Self::ALL.0 & !Self::MODEL_OUTPUT.0);

    /// The union of both sets.
    pub const fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// Whether every event of `other` is in this set.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether `kind` is in this set.
    pub const fn contains_kind(self, kind: EventKind) -> bool {
        let one = Self::of(kind);
        one.0 != 0 && self.contains(one)
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The set of the event at `position` in the list.
    pub(crate) const fn at(position: usize) -> Self {
        Self(1 << position)
    }

    /// The position in the list of the first event of the set (of its only one, for the set of
    /// one event); `EVENT_COUNT` or more for the empty set.
    pub(crate) const fn position(self) -> usize {
        self.0.trailing_zeros() as usize
    }
}

impl BitOr for EventSet {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        self.union(rhs)
    }
}

impl fmt::Debug for EventSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set()
            .entries(Self::KINDS.into_iter().filter(|k| self.contains_kind(*k)))
            .finish()
    }
}
