//! The executed blocks on their way from the vCPU to the engine (issue 20): QEMU's callback at
//! each block only notes the block, and what the inline counter says of the block before it,
//! in a ring, without a lock or an atomic read-modify-write (a lock and two atomic swaps per
//! block took 40 % of a recording); the feeder thread (`feeder`) takes them from there under
//! the plugin's lock and runs the engine on the other core, and whoever needs the engine up to
//! date (a system call, the end, a stop, `rtit record` reading the position while QEMU's
//! gdbstub holds the program) takes what is left first ([`take`]).
//!
//! One producer (the vCPU) and one consumer at a time (whoever holds the plugin's lock): the
//! producer writes an entry, then publishes it by raising [`PUSHED`] (release); the consumer
//! reads up to it (acquire), then frees the entries by raising [`TAKEN`]. An entry is one
//! word, so that the cache lines the two cores pass to each other carry eight blocks each.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rtit_recorder::qemu::engine::{Counts, Started};

use crate::published::Line;
use crate::versioned::started;

/// Entries the ring holds: 1 M blocks (8 MB), some seven million instructions: on a smaller
/// ring the two cores passed its lines back and forth often enough to stall both (sort, 106 M
/// instructions: 0.38-0.67 s on 16 K entries, 0.37-0.52 s on 1 M).
const SIZE: usize = 1 << 20;

static ENTRIES: [AtomicU64; SIZE] = [const { AtomicU64::new(0) }; SIZE];

/// Entries taken between two publications of [`TAKEN`], so that a full ring gets room
/// while a batch is under way.
const PUBLISH: u64 = 64;

/// Entries pushed so far (`rtit record` reads it, with [`TAKEN`], to know the engine is up to
/// date while the program is stopped).
pub static PUSHED: Line<AtomicU64> = Line(AtomicU64::new(0));
/// Entries taken so far.
pub static TAKEN: Line<AtomicU64> = Line(AtomicU64::new(0));

/// [`TAKEN`] as the producer last read it: it reads the consumer's line again only when this
/// says the ring is full.
static TAKEN_SEEN: Line<AtomicU64> = Line(AtomicU64::new(0));

/// The inline counter when the running block started (the vCPU's own): the running block's
/// count is the counter now less this. `rtit record` reads it, with `published::STARTED`,
/// to place a sample.
pub static BLOCK_STARTED: Line<AtomicU64> = Line(AtomicU64::new(0));

/// The counts of the block running on the vCPU (which it alone calls).
pub fn running() -> Counts {
    Counts {
        started: started().load(Ordering::Relaxed) - BLOCK_STARTED.load(Ordering::Relaxed),
    }
}

/// Another vCPU runs from now on (`threads`), in a block of which `counts` started already
/// (a system call's, which returns now; else none): [`running`] counts it from here.
pub fn restart(counts: Counts) {
    let started = started().load(Ordering::Relaxed);
    BLOCK_STARTED.store(started.wrapping_sub(counts.started), Ordering::Relaxed);
}

/// Block `id` starts on the vCPU: the entry for it, the running block's counts now final.
pub fn starts(id: u32) -> Started {
    let started = started().load(Ordering::Relaxed);
    let before = Counts {
        started: started - BLOCK_STARTED.load(Ordering::Relaxed),
    };
    BLOCK_STARTED.store(started, Ordering::Relaxed);
    Started { id, before }
}

/// Notes a block that started ([`starts`]); false if the ring is full (take from it, then
/// push again). The vCPU alone calls it.
#[inline]
pub fn push(s: Started) -> bool {
    let pushed = PUSHED.load(Ordering::Relaxed);
    if pushed - TAKEN_SEEN.load(Ordering::Relaxed) == SIZE as u64 {
        let taken = TAKEN.load(Ordering::Acquire);
        TAKEN_SEEN.store(taken, Ordering::Relaxed);
        if pushed - taken == SIZE as u64 {
            return false;
        }
    }
    if pushed % 8 == 0 {
        prefetch_for_write(&ENTRIES[(pushed as usize + AHEAD) % SIZE]);
    }
    ENTRIES[pushed as usize % SIZE].store(s.word(), Ordering::Relaxed);
    PUSHED.store(pushed + 1, Ordering::Release);
    true
}

/// Entries ahead of the next push whose line the producer asks for in advance.
const AHEAD: usize = 256;

/// Asks for the cache line of `at` to write it soon: the line was last read by the consumer
/// on the other core, and a store that waits for it there holds up every store after it
/// (stores retire in order), which stalled QEMU's translated code at every line of the ring
/// (0.3 s of a 0.5 s run of sort). PREFETCHW asks for the line exclusive; `_mm_prefetch`
/// with `_MM_HINT_ET0` compiles to PREFETCHT0 without the `prfchw` target feature, which
/// brings it shared, so that the store still waited for the other core: that cost gzip's
/// recording 3.3-4.0 s for 2.2-2.5 s with PREFETCHW, side by side, in a phase where the VM
/// was slow (issue 20). PREFETCHT0 stays where the CPU lacks PREFETCHW.
#[inline]
fn prefetch_for_write(at: &AtomicU64) {
    #[allow(unsafe_code)]
    // SAFETY: a prefetch is a hint: it reads nothing, writes nothing, and cannot fault;
    // PREFETCHW runs only where CPUID says the CPU has it.
    unsafe {
        if HAS_PREFETCHW.load(Ordering::Relaxed) {
            std::arch::asm!("prefetchw [{0}]", in(reg) at.as_ptr(), options(nostack, readonly, preserves_flags))
        } else {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at.as_ptr().cast())
        }
    }
}

/// Whether the CPU has PREFETCHW, set by [`detect`].
static HAS_PREFETCHW: AtomicBool = AtomicBool::new(false);

/// Looks up once whether the CPU has PREFETCHW: CPUID leaf 8000_0001h, ECX bit 8
/// (PRFCHW, Intel SDM vol. 2, CPUID; AMD's 3DNowPrefetch).
pub fn detect() {
    let ecx = std::arch::x86_64::__cpuid(0x8000_0001).ecx;
    HAS_PREFETCHW.store(ecx & (1 << 8) != 0, Ordering::Relaxed);
}

/// Threads other than the feeder waiting for the plugin's lock (`shared::lock`): a batch the
/// feeder takes ends early for them, at the next publication of [`TAKEN`]. A system call's
/// callbacks on the vCPU waited ~29 µs for the lock on average, the rest of a batch of up to
/// 1,024 blocks and the trace's write after it (rdtsc around the lock, gzip; issue 20).
pub static WANTED: Line<AtomicU64> = Line(AtomicU64::new(0));

/// Whether a thread other than the feeder waits for the plugin's lock ([`WANTED`]).
pub fn wanted() -> bool {
    WANTED.load(Ordering::Relaxed) != 0
}

/// How many entries were taken in all.
pub fn taken() -> u64 {
    TAKEN.load(Ordering::Relaxed)
}

/// How many entries are waiting, and how many were pushed in all.
pub fn waiting() -> (u64, u64) {
    let pushed = PUSHED.load(Ordering::Acquire);
    (pushed - TAKEN.load(Ordering::Relaxed), pushed)
}

/// Takes up to `max` entries in order, handing `f` an iterator over them; what it took is
/// freed. Callers hold the plugin's lock, so one takes at a time. `yielding` (the feeder):
/// the iterator ends early once another thread waits for the lock ([`WANTED`]).
pub fn take(max: usize, yielding: bool, f: impl FnOnce(&mut Entries)) {
    let taken = TAKEN.load(Ordering::Relaxed);
    let pushed = PUSHED.load(Ordering::Acquire);
    let end = taken + (pushed - taken).min(max as u64);
    let mut entries = Entries {
        next: taken,
        end,
        yielding,
    };
    f(&mut entries);
    TAKEN.store(entries.next, Ordering::Release);
}

/// The entries [`take`] takes, freeing them in the ring as it goes.
pub struct Entries {
    next: u64,
    end: u64,
    yielding: bool,
}

impl Iterator for Entries {
    type Item = Started;

    #[inline]
    fn next(&mut self) -> Option<Started> {
        let k = self.next;
        if k == self.end {
            return None;
        }
        self.next += 1;
        let word = ENTRIES[k as usize % SIZE].load(Ordering::Relaxed);
        // Not the batch's last: [`take`] publishes it once the caller has done with it.
        if self.next % PUBLISH == 0 && self.next != self.end {
            TAKEN.store(self.next, Ordering::Release);
            if self.yielding && wanted() {
                self.end = self.next;
            }
        }
        Some(Started::from_word(word))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = (self.end - self.next) as usize;
        (0, Some(n))
    }
}
