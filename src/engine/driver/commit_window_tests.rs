//! The commit window: a settled call's row waits while other calls are live, and the
//! window closes at its deadline, when no other call is live, and before any other write.

use super::*;
use crate::engine::driver::progress::Progress;
use crate::engine::driver::task::TaskResult;
use crate::engine::driver::{COMMIT_WINDOW, InFlight};

/// A live agent call numbered `index`, as the driver keeps it.
fn in_flight(index: u32) -> InFlight {
    InFlight {
        call_id: u64::from(index),
        held: 0,
        kind: CallKind::Agent,
        scope: "root".into(),
        label: format!("agent {index}"),
        phase: None,
        hash: format!("hash-{index}"),
        path: None,
        inputs_hash: None,
        route: None,
        supersedes: Vec::new(),
        cancel: tokio_util::sync::CancellationToken::new(),
        started: false,
        progress: Progress::default(),
        outcome: false,
        session: Default::default(),
        live_reason: None,
    }
}

fn answered(index: u32) -> TaskResult {
    TaskResult::Value {
        value: json!(index),
        usage: Usage::default(),
        attempts: 1,
        session: None,
    }
}

/// A driver with `live` calls in flight, numbered from 0.
fn with_live_calls(world: &World, live: u32) -> Driver {
    live_calls_in(world.driver(Some(LEASE)), live)
}

/// `driver` with `live` calls in flight, numbered from 0.
fn live_calls_in(mut driver: Driver, live: u32) -> Driver {
    for index in 0..live {
        driver.in_flight.insert(index, in_flight(index));
    }
    driver
}

async fn settle(driver: &mut Driver, index: u32) {
    driver.on_done(index, answered(index), None).await;
    driver.commit_or_wait().await;
}

async fn written(world: &World) -> Vec<u32> {
    world.rows().await.iter().map(|row| row.index).collect()
}

#[tokio::test(start_paused = true)]
async fn a_settled_call_waits_for_others_until_the_window_s_deadline() {
    let world = world().await;
    let mut driver = with_live_calls(&world, 3);
    settle(&mut driver, 0).await;
    assert!(written(&world).await.is_empty(), "calls 1 and 2 are live");
    let due = driver.commit_due.expect("a window is open");
    // A call settling within the window joins the group; the deadline stays.
    tokio::time::advance(COMMIT_WINDOW / 2).await;
    settle(&mut driver, 1).await;
    assert_eq!(driver.commit_due, Some(due));
    assert!(written(&world).await.is_empty());
    assert_eq!(driver.settling.len(), 2);
    // At the deadline the group is written in one transaction, though call 2 is live.
    tokio::time::advance(COMMIT_WINDOW / 2).await;
    driver.commit_or_wait().await;
    assert_eq!(written(&world).await, [0, 1]);
    assert!(driver.settling.is_empty() && driver.commit_due.is_none());
    assert_eq!(driver.settled_calls, 2);
}

#[tokio::test(start_paused = true)]
async fn the_last_live_call_closes_the_window_at_once() {
    let world = world().await;
    let mut driver = with_live_calls(&world, 2);
    settle(&mut driver, 1).await;
    assert!(written(&world).await.is_empty());
    // Nothing else can settle into the group: it is written without waiting.
    settle(&mut driver, 0).await;
    let rows = world.rows().await;
    let order: Vec<(u32, u64)> = rows
        .iter()
        .map(|row| (row.index, row.settlement_ordinal))
        .collect();
    assert_eq!(order, [(1, 0), (0, 1)], "in settlement order");
    assert!(driver.commit_due.is_none());
}

#[tokio::test(start_paused = true)]
async fn any_other_write_commits_the_waiting_group_first() {
    let world = world().await;
    let mut driver = with_live_calls(&world, 2);
    settle(&mut driver, 0).await;
    assert!(written(&world).await.is_empty());
    // A checkpoint's row, written while call 1 is live, follows call 0's.
    let ordinal = driver.next_settlement();
    let mut checkpoint = row(7, CallOrigin::Runner, ordinal);
    checkpoint.kind = CallKind::Checkpoint;
    assert!(driver.record_call(&checkpoint, &[]).await.is_ok());
    assert_eq!(written(&world).await, [0, 7]);
    assert!(driver.commit_due.is_none() && driver.settling.is_empty());
    // So does a write of the tick's events (rows read back in settlement order).
    settle(&mut driver, 1).await;
    assert_eq!(written(&world).await, [0, 7, 1]);
    driver.in_flight.insert(2, in_flight(2));
    driver.in_flight.insert(3, in_flight(3));
    settle(&mut driver, 2).await;
    assert_eq!(written(&world).await, [0, 7, 1]);
    assert!(driver.flush_events().await.is_ok());
    assert_eq!(written(&world).await, [0, 7, 1, 2]);
}

#[tokio::test(start_paused = true)]
async fn a_halting_generation_and_the_dry_run_never_wait() {
    let world = world().await;
    let mut driver = with_live_calls(&world, 3);
    driver.begin_halt(Halt::Stop);
    settle(&mut driver, 0).await;
    assert_eq!(
        written(&world).await.len(),
        1,
        "a halting generation writes at once"
    );
    let mut dry = live_calls_in(world.driver(None), 3);
    settle(&mut dry, 0).await;
    assert!(dry.settling.is_empty() && dry.commit_due.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_full_group_is_written_without_waiting() {
    let world = world().await;
    let live = u32::try_from(GROUP_COMMIT_LIMIT).expect("small") + 1;
    let mut driver = with_live_calls(&world, live);
    for index in 0..live - 2 {
        settle(&mut driver, index).await;
    }
    assert!(written(&world).await.is_empty());
    settle(&mut driver, live - 2).await;
    assert_eq!(written(&world).await.len(), GROUP_COMMIT_LIMIT);
}
