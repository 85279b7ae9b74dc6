//! The search: a walk forwards from the values at the first position searched. An
//! instruction's reads are its operands' addresses ([`super::access`]); its writes, and the
//! kernel's, are what memory is told to write while the walk steps over it (`memory::log`),
//! as the index notes them. Where the walk lacks a register an address needs, it takes what
//! both passes know at that position (final, so nothing it adds can be wrong); an address
//! still unknown stops the search there. With anchors and a watch on writes only, the index
//! ([`super::index`]) says which blocks to walk; else a search forwards walks the whole range
//! and one backwards walks one piece below the position at a time ([`PIECE`]), keeping the
//! last hit.

use iced_x86::InstructionInfoFactory;

use super::super::engine::Values;
use super::super::memory::log::{Logging, Noted};
use super::super::walker::Walker;
use super::super::State;
use super::access::{accesses, Access};
use super::index::BLOCK;
use super::{Found, Watch, WatchKind};

/// Positions a search backwards walks at a time: the fill keeps a state every 2^20 (its
/// pieces start there), and a hit is usually near.
const PIECE: u64 = 1 << 20;

/// How often a walk asks whether to stop.
const ASK_EVERY: u64 = 1 << 14;

impl Values {
    /// The first instruction in `from..to` that touches what `watches` watch, or where an
    /// address is unknown; `None` if `interrupted` said to stop.
    pub fn first_access(
        &mut self,
        from: u64,
        to: u64,
        watches: &[Watch],
        interrupted: &mut dyn FnMut() -> bool,
    ) -> Option<Found> {
        let to = to.min(self.len());
        if from >= to || watches.is_empty() {
            return Some(Found::Nothing);
        }
        // Block by block where the index answers: the blocks it says write none of the
        // watched bytes are not walked.
        let mut p = from;
        let mut walk: Option<Walk<'_>> = None;
        while p < to {
            let (end, skip) = match self.indexed(p, watches, true, interrupted) {
                Some((_, end, writes)) => (end.min(to), !writes),
                None => (to, false),
            };
            if skip {
                walk = None;
            } else {
                let mut w = match walk.take() {
                    Some(w) if w.at == p => w,
                    _ => Walk::new(self, p, watches)?,
                };
                match w.run(self, end, true, interrupted)? {
                    Found::Nothing => walk = Some(w),
                    found => return Some(found),
                }
            }
            p = end;
            if interrupted() {
                return None;
            }
        }
        Some(Found::Nothing)
    }

    /// Where the index answers for the crossing from `p`: the start and end of `p`'s block,
    /// and whether the block may write a byte `watches` wait for a write of. `None` where it
    /// does not answer: a watch on reads, no anchors, or `interrupted` said to stop while the
    /// stretch's writes were walked (the fill had not reached it).
    fn indexed(
        &self,
        p: u64,
        watches: &[Watch],
        forwards: bool,
        interrupted: &mut dyn FnMut() -> bool,
    ) -> Option<(u64, u64, bool)> {
        if !self.watch_index || watches.iter().any(|w| w.kind != WatchKind::Write) {
            return None;
        }
        let a = self.anchored_engine()?;
        let (i, bottom, top) = a.stretch_of(p)?;
        // The search's next stretches: above this one going forwards, below it backwards.
        let next: Box<dyn Iterator<Item = usize>> = match forwards {
            true => Box::new(i + 1..a.exact_positions().count()),
            false => Box::new((0..i).rev()),
        };
        let stretch = a.stretch_writes(i, next, interrupted)?;
        let b = (p - bottom) / BLOCK;
        let end = (bottom + (b + 1) * BLOCK).min(top);
        Some((bottom + b * BLOCK, end, stretch.may_write(b as usize, watches)))
    }

    /// The last instruction in `from..to` that touches what `watches` watch, or where an
    /// address is unknown; `None` if `interrupted` said to stop.
    pub fn last_access(
        &mut self,
        from: u64,
        to: u64,
        watches: &[Watch],
        interrupted: &mut dyn FnMut() -> bool,
    ) -> Option<Found> {
        let mut top = to.min(self.len());
        while top > from {
            // The block of the crossing below `top`, where the index answers: skipped if it
            // writes none of the watched bytes.
            let p = top - 1;
            if let Some((start, _, writes)) = self.indexed(p, watches, false, interrupted) {
                let start = start.max(from);
                if !writes {
                    top = start;
                    continue;
                }
                let mut walk = Walk::new(self, start, watches)?;
                match walk.run(self, top, false, interrupted)? {
                    Found::Nothing => top = start,
                    found => return Some(found),
                }
                continue;
            }
            let bottom = top.saturating_sub(1).div_euclid(PIECE).saturating_mul(PIECE).max(from);
            let mut walk = Walk::new(self, bottom, watches)?;
            match walk.run(self, top, false, interrupted)? {
                Found::Nothing => top = bottom,
                found => return Some(found),
            }
        }
        Some(Found::Nothing)
    }
}

/// One walk of a search.
struct Walk<'a> {
    walker: Walker,
    st: State,
    at: u64,
    watches: &'a [Watch],
    /// Whether a watch wants reads: then every instruction's operands are looked at.
    reads: bool,
    factory: InstructionInfoFactory,
    found: Vec<Access>,
}

impl<'a> Walk<'a> {
    fn new(values: &mut Values, from: u64, watches: &'a [Watch]) -> Option<Self> {
        let known = values.at(from)?;
        Some(Self {
            walker: values.new_walker(),
            st: known.merged(),
            at: from,
            watches,
            reads: watches.iter().any(|w| w.kind != WatchKind::Write),
            factory: InstructionInfoFactory::new(),
            found: Vec::new(),
        })
    }

    /// Walks to `to`, stopping at the first find (`first`) or going on to the last one.
    fn run(
        &mut self,
        values: &mut Values,
        to: u64,
        first: bool,
        interrupted: &mut dyn FnMut() -> bool,
    ) -> Option<Found> {
        let mut last = Found::Nothing;
        while self.at < to {
            if self.at % ASK_EVERY == 0 && interrupted() {
                return None;
            }
            let found = self.step(values);
            if found != Found::Nothing {
                if first {
                    return Some(found);
                }
                last = found;
            }
        }
        Some(last)
    }

    /// Looks at the instruction at the walk's position and steps over it: its reads from
    /// its operands, its writes from what memory is told to write.
    fn step(&mut self, values: &mut Values) -> Found {
        let p = self.at;
        let decoded = self.walker.insn(p);
        let mut found = Found::Nothing;
        let mut before = None;
        let mut written = Found::Nothing;
        if let Some((insn, summary)) = decoded {
            // An address the walk lacks may be known to both passes here: learnt before the
            // step, so that the write goes where it goes.
            let reads = self.reads && !super::access::repeated(&insn);
            if reads || summary.map_or(true, |w| w.memory) {
                self.found.clear();
                let known = |w: &mut Self| {
                    let st = &w.st;
                    accesses(st, st, &insn, reads, &mut w.factory, &mut w.found).is_ok()
                };
                if !known(self) {
                    if let Some(k) = values.at(p) {
                        self.st.absorb(&k.merged());
                    }
                    self.found.clear();
                    if !known(self) && reads {
                        found = Found::Unknown { position: p };
                    }
                }
                if reads && found == Found::Nothing {
                    found = self.read(p);
                }
            }
            if self.reads && super::access::repeated(&insn) {
                before = Some(self.st.clone());
            }
            if let Some(b) = &before {
                // A REP string's count is known after it.
                written = self.step_logged(p);
                self.found.clear();
                let ok = accesses(b, &self.st, &insn, true, &mut self.factory, &mut self.found).is_ok();
                found = match ok {
                    true => self.read(p),
                    false => Found::Unknown { position: p },
                };
            }
        }
        if before.is_none() {
            written = self.step_logged(p);
        }
        self.at += 1;
        match found {
            Found::Nothing => written,
            _ => found,
        }
    }

    /// The first read a watch waits for among the accesses found, as a hit at `p`.
    fn read(&self, p: u64) -> Found {
        for a in self.found.iter().filter(|a| !a.write) {
            if let Some((i, w)) = self.watches.iter().enumerate().find(|(_, w)| w.wants(a)) {
                return Found::Hit {
                    position: p,
                    watch: i,
                    address: a.address.max(w.address),
                    write: false,
                };
            }
        }
        Found::Nothing
    }

    /// Steps over `p` and finds what it wrote of the watched bytes as memory was told it
    /// (the kernel's writes included), as the index notes writes ([`super::index`]): the
    /// log is on for the step alone, since the walk also asks the engine, which walks too.
    fn step_logged(&mut self, p: u64) -> Found {
        let log = Logging::start();
        self.walker.step_forward(&mut self.st, p);
        log.look(|noted| written(self.watches, p, noted))
    }
}

/// A write of watched bytes among those `noted` at `p`; an unknown one if all memory was made
/// unknown (a store through an address nobody knows).
fn written(watches: &[Watch], p: u64, noted: &Noted) -> Found {
    let watches = watches.iter().enumerate().filter(|(_, w)| w.kind != WatchKind::Read);
    for (i, w) in watches {
        let end = w.address.saturating_add(w.len);
        let touched = (noted.ranges.iter()).find(|&&(a, n)| a < end && w.address < a.saturating_add(n));
        if let Some(&(a, _)) = touched {
            return Found::Hit {
                position: p,
                watch: i,
                address: a.max(w.address),
                write: true,
            };
        }
        if noted.all {
            return Found::Unknown { position: p };
        }
    }
    Found::Nothing
}
