//! What this CPU does where the SDM leaves the result undefined, found by running the
//! instructions: the replay computes such a value only when the recording says how the CPU
//! that ran the program behaves, never from a guess.

/// Operand pairs for the probe: for most an adder would set AF (bit 4 of `a ^ b ^ r`).
#[cfg(target_arch = "x86_64")]
const OPERANDS: [(u64, u64); 5] = [(0x1f, 0x10), (0x0f, 0x01), (0xff, 0xff), (0x10, 0), (u64::MAX, 0x18)];

/// The instructions probed, and `add` to check that the probe sees AF at all.
#[cfg(target_arch = "x86_64")]
#[derive(Debug, Clone, Copy)]
enum Op {
    And,
    Or,
    Xor,
    Test,
    /// Only the test runs it.
    #[cfg(test)]
    Add,
}

/// Whether AF is set after `op a, b` run on this CPU with AF set beforehand.
#[cfg(target_arch = "x86_64")]
fn af_after(op: Op, a: u64, b: u64) -> bool {
    macro_rules! run {
        ($insn:literal) => {{
            let flags: u64;
            // Safety: register arithmetic and a push/pop pair on the stack the block may use
            // (no `nostack`); nothing else is touched.
            #[allow(unsafe_code)]
            unsafe {
                std::arch::asm!(
                    "mov {t:e}, 0x0f", "add {t:e}, 1", // AF = 1
                    $insn, "pushfq", "pop {f}",
                    a = inout(reg) a => _, b = in(reg) b, t = out(reg) _, f = out(reg) flags)
            };
            flags
        }};
    }
    let flags = match op {
        Op::And => run!("and {a}, {b}"),
        Op::Or => run!("or {a}, {b}"),
        Op::Xor => run!("xor {a}, {b}"),
        Op::Test => run!("test {a}, {b}"),
        #[cfg(test)]
        Op::Add => run!("add {a}, {b}"),
    };
    flags & (1 << 4) != 0
}

/// Whether `and`, `or`, `xor` and `test` leave AF clear on this CPU (SDM Vol. 2, each
/// instruction's "Flags Affected": "The state of the AF flag is undefined"). Intel's
/// processors clear it, as QEMU does, but processors may differ, so the recorder runs each
/// of them with AF set beforehand and with operands for which an adder would set it, and
/// answers yes only if every run cleared it. `None` off x86-64.
pub fn logic_clears_af() -> Option<bool> {
    #[cfg(target_arch = "x86_64")]
    {
        let ops = [Op::And, Op::Or, Op::Xor, Op::Test];
        Some(ops.iter().all(|&op| OPERANDS.iter().all(|&(a, b)| !af_after(op, a, b))))
    }
    #[cfg(not(target_arch = "x86_64"))]
    None
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    #[test]
    fn the_probe_sees_af_where_an_adder_sets_it() {
        // 0x0f + 0x01 carries out of bit 3; 0x10 + 0 does not. A probe blind to AF would
        // call every CPU one that clears it.
        assert!(af_after(Op::Add, 0x0f, 0x01));
        assert!(!af_after(Op::Add, 0x10, 0));
        assert!(logic_clears_af().is_some());
    }
}
