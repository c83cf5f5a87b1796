//! The service layer: what the server does, apart from how it is asked over
//! HTTP (docs/ARCHITECTURE.md, "Rules of the house").

pub mod subscriptions;
