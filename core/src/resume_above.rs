//! The ID a resume rises above, from what the databases hold: the highest key any of them holds,
//! or a number a superuser gave, whichever is higher; and how far ahead of the clock a key may be
//! dated before a superuser must accept it.
//!
//! A key is a value anyone who can write a table with a snowid default can store, so the key a
//! resume rises above is only trusted as far as snowid itself would have dated it: at most
//! `max_lead` (how far issuing may run ahead of the time base) plus [`CLOCK_SLACK_MS`] (a minute)
//! ahead of this server's wall clock. A key dated further ahead moves the time base of every shard, so it
//! needs the superuser's word: given by number, or accepted up to a bound they name. The bound is
//! measured from the wall clock, not from the time base, so that resumes in a row cannot ratchet
//! it forward: a time base a resume raised is not a clock.

use crate::layout;

/// How far ahead of the wall clock, past `max_lead`, a key may be dated and still be taken as
/// snowid's own: more than the clocks of two servers kept by NTP ever disagree, and the most a
/// database owner's stored key can move the time base without the superuser's word.
pub const CLOCK_SLACK_MS: i64 = 60_000;

/// A key a database holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldKey<W> {
    pub id: i64,
    /// Where it is held (the database, table and column, as the host names them).
    pub at: W,
}

/// The highest key is dated further ahead than snowid issues and than the superuser accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyAhead<W> {
    pub key: HeldKey<W>,
    /// How far ahead of the wall clock it is dated.
    pub ahead_ms: i64,
}

/// What a resume rises above.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Above<W> {
    /// The number given (nothing held is higher), or 0 where none was given and nothing is held.
    Given(i64),
    /// The highest key held, and how far ahead of the wall clock it is dated (at most what was
    /// accepted).
    Held { key: HeldKey<W>, ahead_ms: i64 },
}

impl<W> Above<W> {
    pub fn id(&self) -> i64 {
        match self {
            Above::Given(id) => *id,
            Above::Held { key, .. } => key.id,
        }
    }
}

/// The limits a key is checked against.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub epoch_unix_ms: i64,
    pub wall_unix_ms: i64,
    pub max_lead_ms: u64,
    /// How far ahead of the wall clock the superuser accepts a key, if they said.
    pub accepted_ahead_ms: Option<i64>,
}

impl Limits {
    /// How far ahead of the wall clock a key may be dated without the superuser's word.
    pub fn unreviewed_ms(&self) -> i64 {
        (self.max_lead_ms as i64).saturating_add(CLOCK_SLACK_MS)
    }
}

/// The ID to resume above: `given`, or the highest key held if that is higher and dated no
/// further ahead of the wall clock than snowid issues or the superuser accepted.
pub fn resume_above<W>(
    given: Option<i64>,
    highest: Option<HeldKey<W>>,
    limits: &Limits,
) -> Result<Above<W>, KeyAhead<W>> {
    let given = given.unwrap_or(0);
    let Some(key) = highest.filter(|key| key.id > given) else {
        return Ok(Above::Given(given));
    };
    let key_unix_ms = layout::decompose(key.id).map_or(i64::MAX, |p| {
        limits.epoch_unix_ms.saturating_add(p.ms as i64)
    });
    let ahead_ms = key_unix_ms.saturating_sub(limits.wall_unix_ms);
    let allowed_ms = limits
        .accepted_ahead_ms
        .unwrap_or(0)
        .max(limits.unreviewed_ms());
    if ahead_ms > allowed_ms {
        return Err(KeyAhead { key, ahead_ms });
    }
    Ok(Above::Held { key, ahead_ms })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const EPOCH: i64 = 1_767_225_600_000;
    const NOW: i64 = EPOCH + 1_000_000_000;

    fn limits(accepted_ahead_ms: Option<i64>) -> Limits {
        Limits {
            epoch_unix_ms: EPOCH,
            wall_unix_ms: NOW,
            max_lead_ms: 2_000,
            accepted_ahead_ms,
        }
    }

    fn key_at(unix_ms: i64) -> HeldKey<&'static str> {
        HeldKey {
            id: layout::compose((unix_ms - EPOCH) as u64, 5, 0).unwrap(),
            at: "db.t.id",
        }
    }

    #[test]
    fn a_key_no_further_ahead_than_snowid_issues_is_taken() {
        let key = key_at(NOW + 3_000);
        let above = resume_above(None, Some(key.clone()), &limits(None)).unwrap();
        assert_eq!(above.id(), key.id);
        assert_eq!(
            above,
            Above::Held {
                key,
                ahead_ms: 3_000
            }
        );
    }

    #[test]
    fn a_key_further_ahead_needs_the_superusers_word() {
        // Guards against a database owner's stored key moving every shard's time base (0.6.0:
        // a key 50 minutes ahead did it with a notice).
        let key = key_at(NOW + 50 * 60_000);
        assert_eq!(
            resume_above(None, Some(key.clone()), &limits(None)),
            Err(KeyAhead {
                key: key.clone(),
                ahead_ms: 50 * 60_000
            })
        );
        assert!(resume_above(None, Some(key.clone()), &limits(Some(49 * 60_000))).is_err());
        let accepted = resume_above(None, Some(key.clone()), &limits(Some(51 * 60_000)));
        assert_eq!(accepted.unwrap().id(), key.id);
        // Given by number, it is the superuser's own.
        assert_eq!(
            resume_above(Some(key.id), Some(key.clone()), &limits(None)),
            Ok(Above::Given(key.id))
        );
    }

    #[test]
    fn a_higher_number_given_wins_and_nothing_held_is_zero() {
        let key = key_at(NOW);
        assert_eq!(
            resume_above(Some(key.id + 1), Some(key), &limits(None)),
            Ok(Above::Given(key_at(NOW).id + 1))
        );
        assert_eq!(
            resume_above::<&str>(None, None, &limits(None)),
            Ok(Above::Given(0))
        );
    }

    proptest! {
        #[test]
        fn the_bound_is_the_wall_clock_plus_the_lead_or_what_was_accepted(
            ahead_ms in -100_000i64..100_000,
            accepted in proptest::option::of(0i64..100_000),
        ) {
            let taken = resume_above(None, Some(key_at(NOW + ahead_ms)), &limits(accepted)).is_ok();
            let bound = accepted.unwrap_or(0).max(2_000 + CLOCK_SLACK_MS);
            prop_assert_eq!(taken, ahead_ms <= bound);
        }
    }
}
