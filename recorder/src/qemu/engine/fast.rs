//! The fast path: the blocks nearly every execution is, settled a stretch at a time with the
//! model taking a block's run of plain instructions and its branch at once (issue 20: this is
//! the feeder's work at every block); everything else goes to [`Engine::executed`].

use super::{Counts, Engine, Kernel, Pending};
use crate::model::{Edge, Retired};
use crate::qemu::block::Hot;

impl Engine {
    /// Blocks that started one after another, each with the counts of the block before it,
    /// while tracing ([`Self::executed`] for each, which can neither begin tracing nor fail
    /// then): the feeder thread's loop, with the common settling inlined.
    /// A stretch of `code-ran.bin` is cut after the batch once it is long enough.
    pub fn executed_all(&mut self, blocks: impl IntoIterator<Item = (u32, Counts)>) {
        let mut blocks = blocks.into_iter();
        // A sync point the last batch end missed is looked for after each block until one is
        // found: in a loop whose branches leave the same bits pending at every batch end (a
        // batch is a fixed number of blocks) none would ever be found, and a replay would
        // decode its windows from the trace's start.
        while self.sync.searching(self.position()) {
            let Some(block) = blocks.next() else { return };
            self.executed_run(std::iter::once(block));
            self.try_sync();
        }
        self.executed_run(blocks);
        if !self.ended && self.code.due(self.position()) {
            self.cut_code();
        }
        if self.sync.due(self.position()) {
            self.try_sync();
            self.sync.missed(self.position());
        }
    }

    /// The blocks of [`Self::executed_all`], settled.
    #[inline(always)]
    fn executed_run(&mut self, blocks: impl IntoIterator<Item = (u32, Counts)>) {
        let mut blocks = blocks.into_iter();
        while let Some(mut block) = blocks.next() {
            if let (false, Some(p), None) = (self.ended, self.pending, self.delivered) {
                match self.stretch(p, block, &mut blocks) {
                    Some(unsettled) => block = unsettled,
                    None => break,
                }
            }
            let began = self.executed(block.0, block.1);
            debug_assert!(matches!(began, Ok(None)), "tracing began twice");
        }
    }

    /// Settles blocks on the fast path ([`Self::settle_common`]'s rules) from pending block
    /// `p` and the block that starts next, `block`, taking more from `blocks` for as long as
    /// they settle so; returns the first that does not, with the one before it pending, or
    /// `None` once `blocks` ran out. What holds for the whole stretch is checked once, not at
    /// each block: in user mode, pending from its first instruction, no truth or oracle to
    /// feed, and the model taking runs, none of which the fast path changes; and the pending
    /// block stays in a register and the instructions are counted once at the end (issue 20:
    /// their stores and reloads at each block were on the path from one block to the next).
    #[inline(always)]
    fn stretch(
        &mut self,
        mut p: Pending,
        mut block: (u32, Counts),
        blocks: &mut impl Iterator<Item = (u32, Counts)>,
    ) -> Option<(u32, Counts)> {
        let watched = self.truth.is_some() || self.oracle.is_some();
        let user = matches!(self.kernel, Kernel::User);
        let Some(model) = self
            .model
            .as_mut()
            .filter(|m| user && p.first == 0 && !watched && m.takes_runs())
        else {
            return Some(block);
        };
        // Slices, not the vectors: their pointers and lengths stay in registers (issue 20: read
        // again from the engine at each block, since the model is written to in between).
        let (hot, handlers, ran) = (&self.hot[..], &self.handlers[..], &mut self.code.ran[..]);
        let compress = model.compresses_returns();
        let (mut settled, mut count) = (0, 0u64);
        // Both records are looked up at each block: carrying the next block's record over to
        // the next round instead was slower (4.8 against 4.4 ns a block on a capture of gzip).
        let unsettled = loop {
            let h = hot[p.id as usize];
            let next = hot[block.0 as usize].start;
            let Some(edge) = edge(&h, block.1, next, handlers) else {
                break Some(block);
            };
            model.edge_packets(edge, next, h.nlip, compress);
            count += u64::from(h.expect);
            settled += 1;
            super::code::note(ran, block.0);
            p = Pending { id: block.0, first: 0 };
            match blocks.next() {
                Some(b) => block = b,
                None => break None,
            }
        };
        model.end_stretch(count, self.hot[p.id as usize].start);
        self.stats.blocks += settled;
        self.pending = Some(p);
        self.syscall_base = None;
        unsettled
    }

    /// Settles the previous block `p` the way nearly every block is settled, if it is such a
    /// one: it ran whole from its first instruction, in user mode with nothing of the kernel
    /// between, and went on where its last instruction can go (not a REP string instruction
    /// running again, nor a signal handler); the model takes it without a look at each
    /// instruction (issue 20: this is the feeder's work at every block). False, with nothing
    /// done, for everything else, which [`Self::resolve`] settles.
    #[inline(always)]
    pub(super) fn settle_common(&mut self, p: Pending, counts: Counts, next: u64) -> bool {
        let h = self.hot[p.id as usize];
        let ordinary = matches!(self.kernel, Kernel::User) && p.first == 0;
        let Some(edge) = ordinary.then(|| edge(&h, counts, next, &self.handlers)).flatten() else {
            return false;
        };
        let Some(model) = self.model.as_mut() else {
            return false;
        };
        let settled = model.retire_edge(u64::from(h.expect), edge, next, h.nlip);
        if settled && (self.truth.is_some() || self.oracle.is_some()) {
            self.witness(p.id, next);
        }
        settled
    }

    /// What the fast path just settled of block `id` (it went on to `next`), one instruction
    /// at a time, for the truth and the oracle: `--check-fast-path` compares the oracle's
    /// bytes with what [`Self::settle_common`] wrote.
    #[cold]
    fn witness(&mut self, id: u32, next: u64) {
        let insns = &self.blocks[id as usize].insns;
        let kept = self.summaries[id as usize].kept as usize;
        for (i, insn) in insns[..kept].iter().enumerate() {
            let to = insns[..kept].get(i + 1).map_or(next, |n| n.ip);
            if let Some(t) = &mut self.truth {
                t.push(insn.ip);
            }
            if let Some(o) = &mut self.oracle {
                o.retire(&Retired::new(insn.ip, insn.len, insn.cofi, to));
            }
        }
    }

    /// Whether `ip` is a signal handler's address.
    #[inline]
    pub(super) fn is_handler(&self, ip: u64) -> bool {
        is_handler(&self.handlers, ip)
    }
}

/// How block `h`, whose execution `counts` tell, left for `next` if it settles on the fast
/// path (signal `handlers` sorted): it ran whole, it is not one the fast path leaves alone
/// ([`Hot::expect`]), and it went where its last instruction can go: its NLIP after no
/// branch or a conditional one, a direct target (a jump to itself included), or for an
/// indirect branch anywhere but a signal handler or itself (a re-run after a store into the
/// block); `None` for everything else.
#[inline(always)]
fn edge(h: &Hot, counts: Counts, next: u64, handlers: &[u64]) -> Option<Edge> {
    if counts.started != u64::from(h.expect) {
        None
    } else if next == h.first {
        Some(h.on_first)
    } else if next == h.nlip && h.conditional {
        Some(Edge::NotTaken)
    } else {
        h.indirect
            .filter(|_| next != h.last_ip() && !is_handler(handlers, next))
    }
}

/// Whether `ip` is one of `handlers` (sorted).
#[inline]
fn is_handler(handlers: &[u64], ip: u64) -> bool {
    !handlers.is_empty() && handlers.binary_search(&ip).is_ok()
}
