//! What a plan looks like to a person and to a script: the types both the
//! host backends' explanation ([`crate::explain`]) and a container plan
//! ([`crate::container::ContainerPlan::describe`]) return.

/// Why a plan could not be described.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExplainError {
    /// The plan could not be turned into JSON.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// A plan described: its text (each line indented by two spaces) and its
/// JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanDescription {
    /// The lines a person reads.
    pub text: String,
    /// The same plan as JSON.
    pub json: serde_json::Value,
}
