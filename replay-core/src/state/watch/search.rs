//! The search: a walk forwards from the values at the first position searched, each
//! instruction's accesses compared with the watched bytes. The walk's state knows what both
//! passes know where it starts and learns what the instructions compute on the way; where it
//! lacks a register an address needs, it takes what both passes know at that position (final,
//! so nothing it adds can be wrong) before it gives up. A search backwards walks forwards over
//! one piece below the position at a time ([`PIECE`]), keeping the last hit.

use iced_x86::InstructionInfoFactory;

use super::super::engine::Values;
use super::super::walker::Walker;
use super::super::State;
use super::access::{accesses, Access};
use super::index::BLOCK;
use super::{Found, Watch, WatchKind};
use crate::image::AddressSpace;

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
    space: AddressSpace,
    st: State,
    at: u64,
    watches: &'a [Watch],
    /// Whether a watch wants reads: then every instruction's accesses are looked at, else
    /// only those of instructions that write memory.
    reads: bool,
    factory: InstructionInfoFactory,
    found: Vec<Access>,
}

impl<'a> Walk<'a> {
    fn new(values: &mut Values, from: u64, watches: &'a [Watch]) -> Option<Self> {
        let known = values.at(from)?;
        Some(Self {
            walker: values.new_walker(),
            space: known.space().clone(),
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

    /// Looks at the instruction at the walk's position and steps over it.
    fn step(&mut self, values: &mut Values) -> Found {
        let p = self.at;
        let (decoded, special) = self.walker.look(p);
        let mut found = Found::Nothing;
        if let Some((insn, written)) = decoded {
            let looked = self.reads || written.map_or(true, |w| w.memory);
            if looked {
                let before = super::access::repeated(&insn).then(|| self.st.clone());
                self.found.clear();
                let mut ok = match &before {
                    None => accesses(
                        &self.st,
                        &self.st,
                        &insn,
                        self.reads,
                        &mut self.factory,
                        &mut self.found,
                    )
                    .is_ok(),
                    Some(_) => true,
                };
                if !ok {
                    // What both passes know here may tell the address.
                    if let Some(k) = values.at(p) {
                        self.st.absorb(&k.merged());
                    }
                    self.found.clear();
                    ok = accesses(
                        &self.st,
                        &self.st,
                        &insn,
                        self.reads,
                        &mut self.factory,
                        &mut self.found,
                    )
                    .is_ok();
                }
                if !ok {
                    found = Found::Unknown { position: p };
                }
                let watched = self.watched(special);
                self.walker.step_forward(&mut self.st, p);
                self.at += 1;
                if let Some(before) = before {
                    self.found.clear();
                    if accesses(&before, &self.st, &insn, self.reads, &mut self.factory, &mut self.found).is_err() {
                        found = Found::Unknown { position: p };
                    }
                }
                if found == Found::Nothing {
                    found = self.hit(p);
                }
                if found == Found::Nothing {
                    found = self.changed(p, watched);
                }
                return found;
            }
        }
        let watched = self.watched(special);
        self.walker.step_forward(&mut self.st, p);
        self.at += 1;
        self.changed(p, watched)
    }

    /// The first watch an access found wants, as a hit at `p`.
    fn hit(&self, p: u64) -> Found {
        for a in &self.found {
            if let Some((i, w)) = self.watches.iter().enumerate().find(|(_, w)| w.wants(a)) {
                return Found::Hit {
                    position: p,
                    watch: i,
                    address: a.address.max(w.address),
                    write: a.write,
                };
            }
        }
        Found::Nothing
    }

    /// Before crossing a special position, the watched bytes as the walk knows them (value
    /// and known bits), for the writes watches.
    fn watched(&self, special: bool) -> Option<Vec<(u8, u8)>> {
        special.then(|| {
            let writes = self.watches.iter().filter(|w| w.kind != WatchKind::Read);
            writes
                .flat_map(|w| (0..w.len.min(4096)).map(move |i| w.address.wrapping_add(i)))
                .map(|a| self.st.mem.read_bits(a, &self.space))
                .collect()
        })
    }

    /// A write found by what the crossing from `p` changed in the watched bytes (the
    /// kernel's: a system call's, a signal frame's, a map change's).
    fn changed(&self, p: u64, before: Option<Vec<(u8, u8)>>) -> Found {
        let Some(before) = before else {
            return Found::Nothing;
        };
        let Some(after) = self.watched(true) else {
            return Found::Nothing;
        };
        let writes = self
            .watches
            .iter()
            .enumerate()
            .filter(|(_, w)| w.kind != WatchKind::Read);
        let mut k = 0;
        for (i, w) in writes {
            for j in 0..w.len.min(4096) {
                if before[k] != after[k] {
                    return Found::Hit {
                        position: p,
                        watch: i,
                        address: w.address.wrapping_add(j),
                        write: true,
                    };
                }
                k += 1;
            }
        }
        Found::Nothing
    }
}
