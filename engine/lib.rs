//! ward: a teaching-hospital pipeline for coding agents on GitHub issues.
//! `stage` sequences one run; everything else is a boundary it calls.

pub mod actions;
pub mod agent;
pub mod budget;
pub mod chart;
pub mod cli;
pub mod codeowners;
pub mod command;
pub mod config;
pub mod defaults;
pub mod demo;
pub mod discharge;
pub mod doctor;
pub mod event;
pub mod family;
pub mod fault;
pub mod followups;
pub mod forge;
pub mod governance;
pub mod groundedness;
pub mod hospital;
pub mod install;
pub mod lockdown;
pub mod patient_comment;
pub mod precedent;
pub mod prompt;
pub mod report;
pub mod rules;
pub mod runner;
pub mod secrets;
pub mod simulate;
pub mod stage;
pub mod sweep;
pub mod transfer;
pub mod untrusted;
pub mod workspace;
