//! Rein's interventions: typed handlers that authorize, guide, confirm and transform what an
//! agent does. (Filled in by the interventions work.)
