//! Command runners: execute one command, return a bounded result.
