//! This node's answer to another node's check, through the setting `snowid.citus_claim`.
//!
//! A node asks with `SELECT pg_catalog.set_config('snowid.citus_claim', '<question>', true)`
//! (see `super::metadata::ask`), and `set_config` returns the setting's value as shown, which
//! this setting's show hook makes the answer to the question just set. No name that a schema
//! resolves is involved (the setting's prefix is snowid's alone, and `pg_catalog` is no database
//! owner's), so nothing a database owner creates can stand in for the answer, or make the
//! question ambiguous. The setting is a superuser's (`SUSET`), readable by superusers only, and
//! left out of `SHOW ALL`, `pg_settings`, the configuration files and `RESET ALL`: it is a
//! channel between nodes, not a setting to configure.
//!
//! The answer (see `snowid_core::citus::Answer`) says the group this node takes itself to be in,
//! as this database records it now (after any change of it under way commits), and every shard
//! it claims or generates for now. A node asked in another database than the one
//! `snowid.citus_database` names refuses to answer: its shards come from that database's Citus
//! group, and a question through another database's cluster cannot be told which.
//!
//! Asked, this node learns the asker's claim: a node that Citus's record here does not have (a
//! coordinator whose worker `stop_metadata_sync_to_node` reset, say) is recorded with its claim
//! among the told nodes (see `super::report::ToldNodes`); and if the asker's claim makes this
//! node's last check out of date, this node checks again before it generates next.

use super::check::database_name;
use super::metadata;
use super::presence;
use super::report::Report;
use super::segment::{segment, Segment};
use crate::server::mask_key;
use crate::server::settings;
use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::prelude::*;
use snowid_core::citus::{self, Answer, Question};
use snowid_core::host::Clock;
use std::ffi::{c_char, CStr, CString};
use std::sync::Mutex;

/// The setting's name.
pub const NAME: &CStr = c"snowid.citus_claim";

/// The question last set, in this process.
static QUESTION: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);

/// The answer last shown, kept until the next (PostgreSQL copies it at once).
static SHOWN: Mutex<Option<CString>> = Mutex::new(None);

/// Defines the setting. Call only from `_PG_init` during `shared_preload_libraries` processing.
pub fn define() {
    // SAFETY: the show hook is guarded.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            NAME,
            c"Another Citus node's question about this node's snowid shards; shown, the answer.",
            c"Set by another node's check over Citus's connections, with set_config, which \
              returns this node's answer. Not a setting to configure.",
            &QUESTION,
            GucContext::Suset,
            GucFlags::NO_SHOW_ALL
                | GucFlags::NO_RESET_ALL
                | GucFlags::SUPERUSER_ONLY
                | GucFlags::DISALLOW_IN_FILE
                | GucFlags::DISALLOW_IN_AUTO_FILE,
            None,
            None,
            Some(show_answer),
        );
    }
}

/// The show hook: the answer to the question set, or nothing while none is.
#[pg_guard]
unsafe extern "C-unwind" fn show_answer() -> *const c_char {
    let question = QUESTION
        .get()
        .map(|q| q.to_string_lossy().into_owned())
        .unwrap_or_default();
    let text = match question.is_empty() {
        true => String::new(),
        false => match Question::parse(&question) {
            Ok(question) => answer(&question)
                .map(|a| a.to_text())
                .unwrap_or_else(|why| Answer::refusal(&why)),
            Err(why) => Answer::refusal(&format!("\"{question}\" is not a question: {why}")),
        },
    };
    let mut shown = SHOWN.lock().unwrap_or_else(|e| e.into_inner());
    *shown = Some(CString::new(text).unwrap_or_default());
    shown.as_ref().map_or(std::ptr::null(), |t| t.as_ptr())
}

/// This node's answer to `question`, or why it gives none.
fn answer(question: &Question) -> Result<Answer, String> {
    let segment = segment()
        .filter(|_| presence::in_use())
        .ok_or("Citus is not preloaded beside snowid on this node")?;
    let database = database_name();
    let wanted = settings::citus_database();
    if database != wanted {
        return Err(format!(
            "this node takes its Citus group from database \"{wanted}\" \
             (snowid.citus_database), and was asked in \"{database}\""
        ));
    }
    let (group, sequence) = metadata::local_group()
        .ok_or_else(|| format!("database \"{database}\" has no citus extension"))?;
    let configured = settings::configured_shards();
    let claim = citus::claim(&configured, group);
    let report = segment.report();
    note(segment, question, report.as_ref());
    let issued = (presence::own_ids().outside)(&claim);
    Ok(Answer {
        group,
        by_hand: citus::by_hand(&configured),
        claims: claim.union(&segment.generating()),
        // The coordinator's own sequence, read now: a node just added asks it at once.
        given: match group {
            0 => sequence,
            _ => report.map_or(-1, |r| r.given),
        },
        issued,
        mask_keys: mask_key::fingerprints_if_any(),
    })
}

/// The answer to 0.7.0's question, `snowid_citus_claim(asker_group, asker_claim)`, which a node
/// still running 0.7.0 asks: every shard this node claims or generates for, in 0.7.0's form of
/// a claim set by hand, which that node refuses whatever group it has this one in; every shard
/// where this node cannot answer (an error would be taken as its group's shards).
pub fn answer_0_7_0(asker_group: i32, asker_claim: &str) -> String {
    let Ok(claim) = snowid_core::shard_set::ShardSet::parse(asker_claim) else {
        return format!("hand:{}", snowid_core::shard_set::ShardSet::all());
    };
    let question = Question {
        from: format!("the node of Citus group {asker_group} (snowid 0.7.0)"),
        group: asker_group,
        claim,
        recorded: -1,
        mask_keys: None,
    };
    match answer(&question) {
        Ok(answer) => format!("hand:{}", answer.claims),
        Err(_) => format!("hand:{}", snowid_core::shard_set::ShardSet::all()),
    }
}

/// Learns the asker's claim: records it among the told nodes (which this node's checks count for
/// a node Citus's record here does not have, and for one of it that cannot answer them), and
/// calls for a new check if the claim makes the last one out of date (asking every node again,
/// for a node of Citus's record here). A told node is recorded afresh at each
/// question, so that one that stops asking is forgotten (see `super::report::TOLD_FOR`).
fn note(segment: &Segment, question: &Question, report: Option<&Report>) {
    let name = report.map(|r| r.node.name.as_str());
    if name == Some(question.from.as_str()) {
        return;
    }
    let asked_here = report.is_some_and(|r| r.asked(&question.from));
    {
        let _lock = segment.told().lock();
        let mut told = segment.told_nodes();
        told.record(question, snowid_core::clock::SystemClock.wall_ms());
        segment.told().publish(&mut told);
    }
    let out_of_date = report.is_none_or(|r| {
        citus::out_of_date(
            &r.claim(),
            &r.refused(),
            &r.refused_for(&question.from),
            &question.claim,
        )
    });
    // A node whose public IDs' keys differ from this node's while the last check found none
    // that differ, or the other way round: a check that asks every node, while generation goes
    // on, finds the difference, or finds it gone (see `super::check`).
    let differ_now = question
        .mask_keys
        .as_ref()
        .is_some_and(|theirs| mask_key::fingerprints_if_any().is_some_and(|mine| &mine != theirs));
    let differed = report.is_some_and(|r| r.mask_keys_differ.is_some());
    if question.mask_keys.is_some() && differ_now != differed {
        segment.want_asking();
    }
    if out_of_date {
        if asked_here {
            segment.want_asking();
        }
        segment.want_check();
    }
}
