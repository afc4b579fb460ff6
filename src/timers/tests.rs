//! The automatic-resume policy: the process setting at its edges, the script's field, and
//! what is scheduled (or why not) for each kind of pause.

use serde_json::json;

use super::*;
use crate::model::{
    AutoResume, Limits, PauseReason, RoutingSnapshot, RunId, RunRecord, RunStatus, ScriptSource,
    Usage,
};

/// A run paused on a usage limit that lifts at `reset_at`, if the provider said.
fn usage_paused(reset_at: Option<i64>) -> RunRecord {
    RunRecord {
        run_id: RunId::parse("lq3k2m1-abc123").unwrap(),
        project_dir: "/home/dev/shop".into(),
        workflow_name: "review".to_owned(),
        status: RunStatus::Paused,
        pause_reason: Some(PauseReason::UsageLimit),
        error_code: None,
        error_message: None,
        script: "await agent('look');".to_owned(),
        script_file: "/home/dev/shop/review.js".into(),
        script_source: ScriptSource::Path,
        script_revisions: Vec::new(),
        meta: json!({"name": "review"}),
        args: json!({}),
        cwd: "/home/dev/shop".into(),
        limits: Limits::default(),
        phases: Vec::new(),
        current_phase: None,
        result: None,
        started_at: 1,
        updated_at: 1,
        token_usage: Usage::default(),
        stream_id: "0123456789abcdef0123456789abcdef".to_owned(),
        generation: 1,
        setup: None,
        auth_context: None,
        checkpoint_context: None,
        reset_hint: None,
        reset_at,
        auto_resume: AutoResume::default(),
        routing: RoutingSnapshot::default(),
        files: Default::default(),
        caller: None,
        workspace: None,
        summary: None,
    }
}

#[test]
fn the_process_setting_reads_on_off_and_a_count_up_to_the_ceiling() {
    let max = |value| AutoResumePolicy::parse(value).map(|p| p.max_resumes);
    assert_eq!(max(None), Ok(DEFAULT_MAX_RESUMES));
    assert_eq!(max(Some("on")), Ok(DEFAULT_MAX_RESUMES));
    assert_eq!(max(Some(" OFF ")), Ok(0));
    assert_eq!(max(Some("0")), Ok(0));
    assert_eq!(max(Some("1")), Ok(1));
    assert_eq!(max(Some("100")), Ok(100));
    for bad in ["101", "-1", "3.5", "sometimes"] {
        let error = max(Some(bad)).unwrap_err();
        assert!(error.contains(bad) && error.contains("on, off"), "{error}");
    }
}

#[test]
fn the_script_field_is_a_boolean_or_refused_by_name() {
    assert_eq!(meta_setting(&json!({})), Ok(None));
    assert_eq!(meta_setting(&json!({"autoResume": false})), Ok(Some(false)));
    assert_eq!(meta_setting(&json!({"autoResume": true})), Ok(Some(true)));
    let error = meta_setting(&json!({"autoResume": "no"})).unwrap_err();
    assert!(error.contains("meta.autoResume"), "{error}");
}

#[test]
fn a_known_reset_is_scheduled_a_few_seconds_after_it() {
    let record = usage_paused(Some(1_700_000_000_000));
    let Some(Schedule::At(at)) = schedule(&record, AutoResumePolicy::default()) else {
        panic!("nothing scheduled");
    };
    let wait = at - 1_700_000_000_000;
    assert!((JITTER_MS.0..=JITTER_MS.1).contains(&wait), "{wait}");
    // The same decision twice, and another run sharing the reset waits differently.
    assert_eq!(
        schedule(&record, AutoResumePolicy::default()),
        Some(Schedule::At(at))
    );
    let other = RunRecord {
        run_id: RunId::parse("lq3k2m1-zzz999").unwrap(),
        ..record.clone()
    };
    assert_ne!(
        schedule(&other, AutoResumePolicy::default()),
        Some(Schedule::At(at))
    );
}

#[test]
fn nothing_is_scheduled_without_a_reset_when_opted_out_or_used_up() {
    let policy = AutoResumePolicy::default();
    assert_eq!(
        schedule(&usage_paused(None), policy),
        Some(Schedule::NoReset)
    );
    let reset = Some(1_700_000_000_000);
    let by_script = RunRecord {
        meta: json!({"autoResume": false}),
        ..usage_paused(reset)
    };
    assert_eq!(
        schedule(&by_script, policy),
        Some(Schedule::Off(OptOut::Script))
    );
    let by_owner = RunRecord {
        limits: Limits {
            auto_resume: Some(false),
            ..Limits::default()
        },
        ..usage_paused(reset)
    };
    assert_eq!(
        schedule(&by_owner, policy),
        Some(Schedule::Off(OptOut::Owner))
    );
    assert_eq!(
        schedule(&usage_paused(reset), AutoResumePolicy { max_resumes: 0 }),
        Some(Schedule::Off(OptOut::Process))
    );
    let used_up = RunRecord {
        auto_resume: AutoResume {
            due_at: None,
            count: DEFAULT_MAX_RESUMES,
        },
        ..usage_paused(reset)
    };
    assert_eq!(
        schedule(&used_up, policy),
        Some(Schedule::UsedUp(DEFAULT_MAX_RESUMES))
    );
    let one_left = RunRecord {
        auto_resume: AutoResume {
            due_at: None,
            count: DEFAULT_MAX_RESUMES - 1,
        },
        ..usage_paused(reset)
    };
    assert!(matches!(schedule(&one_left, policy), Some(Schedule::At(_))));
}

#[test]
fn other_endings_schedule_nothing_and_describe_nothing() {
    let policy = AutoResumePolicy::default();
    let checkpoint = RunRecord {
        pause_reason: Some(PauseReason::CheckpointRequired),
        ..usage_paused(Some(5))
    };
    assert_eq!(schedule(&checkpoint, policy), None);
    let completed = RunRecord {
        status: RunStatus::Completed,
        pause_reason: None,
        ..usage_paused(Some(5))
    };
    assert_eq!(schedule(&completed, policy), None);
    assert_eq!(describe(&completed, policy), None);
}

#[test]
fn status_reads_the_stored_moment_or_says_why_there_is_none() {
    let policy = AutoResumePolicy::default();
    let scheduled = RunRecord {
        auto_resume: AutoResume {
            due_at: Some(1_700_000_002_000),
            count: 0,
        },
        ..usage_paused(Some(1_700_000_000_000))
    };
    let text = describe(&scheduled, policy).unwrap();
    assert!(
        text.contains("resumes by itself at 2023-11-14T22:13:22"),
        "{text}"
    );
    let text = describe(&usage_paused(None), policy).unwrap();
    assert!(text.contains("no reset time known"), "{text}");
    // Schedulable by this process's rules, yet nothing stored: off where it paused, or
    // cancelled since.
    let text = describe(&usage_paused(Some(1_700_000_000_000)), policy).unwrap();
    assert!(text.contains("resume it by hand"), "{text}");
}
