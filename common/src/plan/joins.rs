//! The join's tables for a plan, built once by the threads that need
//! them and shared (a small concurrent cache).

use super::*;

/// The built joins of a halves plan's pieces, shared by the threads
/// counting its tasks: a piece's quarter tables are built once, not per
/// task. Tasks come in id order (piece by piece), so the last one built is
/// enough (one set of tables in memory, as the join alone keeps); a join
/// still in use by a task stays alive through its `Arc`.
///
/// The threads that need a piece build its four quarter tables together,
/// one table each, rather than one building while the rest wait: at N=18
/// the one piece's tables take about 120 ms of CPU, a core left idle that
/// long on 2 threads.
#[derive(Default)]
pub(super) struct Joins {
    pub(super) state: Mutex<JoinsState>,
    /// Told when a build ends (done or failed).
    pub(super) built: Condvar,
}

#[derive(Default)]
pub(super) struct JoinsState {
    pub(super) kept: Vec<(u8, Arc<Join>)>,
    pub(super) building: Option<Building>,
    /// The last piece whose build failed, and why (a waiter gives the same
    /// answer rather than building it again).
    pub(super) failed: Option<(u8, TooLarge)>,
}

/// A piece's join being built: the quarter tables handed out so far and
/// those finished.
pub(super) struct Building {
    pub(super) piece: u8,
    pub(super) shape: Arc<Shape>,
    pub(super) room: Arc<Room>,
    /// The next quarter table to hand out.
    pub(super) next: usize,
    pub(super) quarters: [Option<Quarter>; QUARTERS],
    /// Quarter tables handed out and not yet finished.
    pub(super) running: usize,
    pub(super) failed: Option<TooLarge>,
    /// A table's build panicked: nothing more is handed out, nothing kept
    /// (the threads that need the piece then build it again).
    pub(super) panicked: bool,
}

impl Building {
    /// Whether the rest of the tables are to be built.
    fn going(&self) -> bool {
        self.failed.is_none() && !self.panicked
    }
}

/// Ends its thread's part of a build if the thread panics while building a
/// table, so that the threads waiting for the build do not wait forever.
pub(super) struct EndOnPanic<'a>(&'a Joins);

impl Drop for EndOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let mut s = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(b) = s.building.as_mut() {
                b.running -= 1;
                b.panicked = true;
                if b.running == 0 {
                    s.building = None;
                }
            }
            self.0.built.notify_all();
        }
    }
}

/// Built joins kept by [`Joins`].
pub(super) const JOINS_KEPT: usize = 1;

impl std::fmt::Debug for Joins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Joins")
    }
}

impl Joins {
    /// Piece `piece`'s join of an `n`×`n` board, built if not kept. A
    /// thread that needs a piece being built builds one of its quarter
    /// tables not yet handed out, or waits for the others'.
    pub(super) fn get(
        &self,
        n: usize,
        piece: u8,
        budget: Budget,
        path: Option<Path>,
    ) -> Result<Arc<Join>, TooLarge> {
        let lock = || self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut s = lock();
        loop {
            if let Some((_, j)) = s.kept.iter().find(|(p, _)| *p == piece) {
                return Ok(j.clone());
            }
            match &mut s.building {
                None => {
                    if let Some((_, e)) = s.failed.filter(|(p, _)| *p == piece) {
                        return Err(e);
                    }
                    // Let the old tables go before the new ones are built.
                    if s.kept.len() == JOINS_KEPT {
                        s.kept.remove(0);
                    }
                    s.building = Some(Building {
                        piece,
                        shape: Arc::new(Shape::piece(n, piece.into()).0),
                        room: Arc::new(Room::new(budget.quarters)),
                        next: 0,
                        quarters: Default::default(),
                        running: 0,
                        failed: None,
                        panicked: false,
                    });
                }
                Some(b) if b.piece == piece && b.next < QUARTERS && b.going() => {
                    let (i, shape, room) = (b.next, b.shape.clone(), b.room.clone());
                    b.next += 1;
                    b.running += 1;
                    drop(s);
                    let quarter = {
                        let _end_on_panic = EndOnPanic(self);
                        shape.quarter(i, &room)
                    };
                    // The last to finish takes the shape back for the join.
                    drop((shape, room));
                    s = lock();
                    let b = s
                        .building
                        .as_mut()
                        .expect("a build ends with its last table");
                    b.running -= 1;
                    match quarter {
                        Ok(q) => b.quarters[i] = Some(q),
                        Err(e) => b.failed = Some(e),
                    }
                    let last = b.running == 0 && (b.next == QUARTERS || !b.going());
                    if last {
                        let b = s.building.take().expect("checked above");
                        s.finish(b, budget, path);
                        self.built.notify_all();
                    }
                }
                // Another thread builds this piece's last tables, or
                // another piece: wait for it to end.
                Some(_) => s = self.built.wait(s).unwrap_or_else(|e| e.into_inner()),
            }
        }
    }
}

impl JoinsState {
    /// Keeps a build's join, or its failure (nothing, if a table panicked).
    fn finish(&mut self, b: Building, budget: Budget, path: Option<Path>) {
        if let Some(e) = b.failed {
            self.failed = Some((b.piece, e));
            return;
        }
        if b.panicked {
            return;
        }
        let quarters = b.quarters.map(|q| q.expect("every table built"));
        let shape = Arc::into_inner(b.shape).expect("the builders are done with the shape");
        self.kept
            .push((b.piece, Arc::new(shape.join(quarters, budget).on(path))));
    }
}
