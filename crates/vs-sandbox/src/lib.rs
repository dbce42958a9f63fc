//! vs-sandbox: the one project path policy, host resources, operator
//! controls, the confinement trait with its backends, and command runners.

pub mod runner;
