//! The note kinds of the chart protocol: a closed set, so a typo is a
//! compile error in the engine and a parse error (with its line) in what an
//! agent or a person wrote, never a chart that the next reader refuses.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

macro_rules! kinds {
    ($($variant:ident = $name:literal, engine: $engine:literal;)*) => {
        /// What a note is. Roles write the kinds `ward.yml` grants them; the
        /// engine writes the rest ([`NoteKind::engine_only`]).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum NoteKind {
            $($variant,)*
        }

        impl NoteKind {
            /// Every kind, in the order people read them in the docs.
            pub const ALL: &'static [NoteKind] = &[$(NoteKind::$variant,)*];

            /// The name in sentinels and in `ward.yml`: `TREATMENT_PLAN`.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(NoteKind::$variant => $name,)*
                }
            }

            /// Kinds only the engine writes: an agent's note of one of these
            /// kinds is refused, and `ward.yml` cannot grant them to a role.
            pub const fn engine_only(self) -> bool {
                match self {
                    $(NoteKind::$variant => $engine,)*
                }
            }
        }
    };
}

kinds! {
    Admission = "ADMISSION", engine: true;
    Triage = "TRIAGE", engine: false;
    Decomposition = "DECOMPOSITION", engine: false;
    TreatmentPlan = "TREATMENT_PLAN", engine: false;
    PlanReview = "PLAN_REVIEW", engine: false;
    RevisedPlan = "REVISED_PLAN", engine: false;
    TreatmentNote = "TREATMENT_NOTE", engine: false;
    IpassHandoff = "IPASS_HANDOFF", engine: false;
    IpassReadback = "IPASS_READBACK", engine: false;
    CodeReview = "CODE_REVIEW", engine: false;
    DischargeChecklist = "DISCHARGE_CHECKLIST", engine: false;
    PrecedentLookup = "PRECEDENT_LOOKUP", engine: true;
    Escalation = "ESCALATION", engine: false;
    Refusal = "REFUSAL", engine: true;
    Sweep = "SWEEP", engine: true;
    Lockdown = "LOCKDOWN", engine: true;
    Cost = "COST", engine: true;
    Groundedness = "GROUNDEDNESS", engine: true;
    FollowUp = "FOLLOW_UP", engine: true;
    Outcome = "OUTCOME", engine: true;
    AdmittedText = "ADMITTED_TEXT", engine: true;
    ProtectedChange = "PROTECTED_CHANGE", engine: true;
    Waiting = "WAITING", engine: true;
    Command = "COMMAND", engine: true;
    PatientComment = "PATIENT_COMMENT", engine: true;
    Network = "NETWORK", engine: true;
    Checkpoint = "CHECKPOINT", engine: true;
}

impl NoteKind {
    /// Every kind's name, joined for error messages.
    pub fn known() -> String {
        Self::ALL.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", ")
    }

    /// Kinds that describe code as it is after treatment: their claims are
    /// checked against the treated tree.
    pub const fn after_treatment(self) -> bool {
        matches!(self, NoteKind::TreatmentNote | NoteKind::CodeReview | NoteKind::DischargeChecklist)
    }

    /// A plan, first or revised.
    pub const fn is_plan(self) -> bool {
        matches!(self, NoteKind::TreatmentPlan | NoteKind::RevisedPlan)
    }
}

/// A name that is not a note kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("note kind `{0}` is unknown (known kinds: {known})", known = NoteKind::known())]
pub struct UnknownKind(pub String);

impl FromStr for NoteKind {
    type Err = UnknownKind;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.iter().copied().find(|k| k.as_str() == s).ok_or_else(|| UnknownKind(s.to_string()))
    }
}

impl fmt::Display for NoteKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for NoteKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Serialize for NoteKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for NoteKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for kind in NoteKind::ALL {
            assert_eq!(kind.as_str().parse::<NoteKind>().unwrap(), *kind);
        }
        let err = "TREATMENT_PLANN".parse::<NoteKind>().unwrap_err();
        assert!(err.to_string().starts_with("note kind `TREATMENT_PLANN` is unknown (known kinds: ADMISSION,"));
    }

    #[test]
    fn the_engine_writes_its_own_kinds() {
        let engine: Vec<&str> = NoteKind::ALL.iter().filter(|k| k.engine_only()).map(|k| k.as_str()).collect();
        assert_eq!(
            engine,
            [
                "ADMISSION",
                "PRECEDENT_LOOKUP",
                "REFUSAL",
                "SWEEP",
                "LOCKDOWN",
                "COST",
                "GROUNDEDNESS",
                "FOLLOW_UP",
                "OUTCOME",
                "ADMITTED_TEXT",
                "PROTECTED_CHANGE",
                "WAITING",
                "COMMAND",
                "PATIENT_COMMENT",
                "NETWORK",
                "CHECKPOINT"
            ]
        );
    }
}
