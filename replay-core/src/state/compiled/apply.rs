//! A translated instruction applied to a state: [`super::super::forward`]'s semantics for its
//! form, the same calls in the same order.

use super::{arith_of, Addr, Alu, Compiled, Extend, Op, Operand, Segment, Shift, Unary};
use crate::image::AddressSpace;
use crate::state::flags::{self, arith, Arith};
use crate::state::ops::sign_extend;
use crate::state::reg::{mask, Reg, RSP};
use crate::state::why::{self, Cause};
use crate::state::State;

impl Compiled {
    /// Applies the instruction to `st`, `next` being the address the history says ran next
    /// (a branch's outcome), if nothing came between; as [`crate::state::forward::step`] does,
    /// for a state with no partly known register (the caller checks).
    #[inline]
    pub(in crate::state) fn forward(&self, st: &mut State, next: Option<u64>, space: &AddressSpace) {
        match self.op {
            Op::Move {
                dst,
                src,
                extend,
                width,
            } => {
                let v = self.read(st, src, space);
                let v = match extend {
                    Extend::Zero => v,
                    Extend::Sign { from } => v.map(|v| sign_extend(v, u32::from(from)) & mask(u32::from(width))),
                };
                self.write(st, dst, v);
            }
            Op::Lea { dst, width } => {
                let v = address(st, &self.addr).map(|a| a & mask(u32::from(width)));
                st.regs.write_slot(dst.slot(), v);
            }
            Op::Alu {
                alu,
                dst,
                src,
                width,
                same,
                generic,
            } => {
                let w = u32::from(width);
                let (a, b) = (self.read(st, dst, space), self.read(st, src, space));
                let (a, b) = match (alu, same) {
                    // xor r, r and sub r, r are zero whatever r held.
                    (Alu::Xor | Alu::Sub, true) => (Some(0), Some(0)),
                    _ => (a, b),
                };
                let op = arith_of(alu);
                let r = match (a, b) {
                    (Some(a), Some(b)) => {
                        let r = match alu {
                            Alu::Add => a.wrapping_add(b),
                            Alu::Sub | Alu::Cmp => a.wrapping_sub(b),
                            Alu::And | Alu::Test => a & b,
                            Alu::Or => a | b,
                            Alu::Xor => a ^ b,
                        } & mask(w);
                        arith(&mut st.flags, op, a, b, r, w);
                        if op == Arith::Logic && st.cpu.logic_clears_af == Some(true) {
                            st.flags.put(flags::AF, 0);
                        }
                        Some(r)
                    }
                    _ => {
                        st.flags.apply(generic);
                        None
                    }
                };
                if !matches!(alu, Alu::Cmp | Alu::Test) {
                    self.write(st, dst, r);
                }
            }
            Op::Unary {
                unary,
                dst,
                width,
                generic,
            } => {
                let w = u32::from(width);
                let a = self.read(st, dst, space);
                let r = a.map(|a| {
                    let r = match unary {
                        Unary::Inc => a.wrapping_add(1),
                        Unary::Dec => a.wrapping_sub(1),
                        Unary::Neg => 0u64.wrapping_sub(a),
                        Unary::Not => !a,
                    } & mask(w);
                    match unary {
                        Unary::Inc => arith(&mut st.flags, Arith::Inc, a, 1, r, w),
                        Unary::Dec => arith(&mut st.flags, Arith::Dec, a, 1, r, w),
                        Unary::Neg => arith(&mut st.flags, Arith::Sub, 0, a, r, w),
                        Unary::Not => {}
                    }
                    r
                });
                if a.is_none() {
                    st.flags.apply(generic);
                }
                self.write(st, dst, r);
            }
            Op::Shift {
                shift,
                dst,
                count,
                width,
                generic,
            } => {
                let w = u32::from(width);
                let bits = w * 8;
                let Some(count) = self.read(st, count, space).map(|c| c & if w == 8 { 63 } else { 31 }) else {
                    st.flags.apply(generic);
                    self.write(st, dst, None);
                    return;
                };
                if count == 0 {
                    return;
                }
                let a = self.read(st, dst, space);
                let r = a.map(|a| {
                    let c = count as u32;
                    let (r, out) = match shift {
                        Shift::Left => (a.checked_shl(c).unwrap_or(0), c <= bits && (a >> (bits - c)) & 1 != 0),
                        Shift::Right => (a.checked_shr(c).unwrap_or(0), c <= bits && (a >> (c - 1)) & 1 != 0),
                        Shift::Arithmetic => {
                            let s = sign_extend(a, w) as i64;
                            ((s >> c.min(63)) as u64, (s >> (c - 1).min(63)) & 1 != 0)
                        }
                    };
                    let r = r & mask(w);
                    arith(&mut st.flags, Arith::Logic, r, r, r, w);
                    st.flags.put(flags::CF, if out { flags::CF } else { 0 });
                    if c > bits {
                        st.flags.forget(flags::CF);
                    }
                    st.flags.forget(flags::OF | flags::AF);
                    r
                });
                if a.is_none() {
                    st.flags.apply(generic);
                }
                self.write(st, dst, r);
            }
            Op::Imul {
                dst,
                a,
                b,
                width,
                generic,
            } => {
                let w = u32::from(width);
                let (a, b) = (self.read(st, a, space), self.read(st, b, space));
                st.flags.apply(generic);
                let r = match (a, b) {
                    (Some(a), Some(b)) => {
                        let full = i128::from(sign_extend(a, w) as i64) * i128::from(sign_extend(b, w) as i64);
                        let r = (full as u64) & mask(w);
                        let fits = i128::from(sign_extend(r, w) as i64) == full;
                        st.flags
                            .put(flags::CF | flags::OF, if fits { 0 } else { flags::CF | flags::OF });
                        Some(r)
                    }
                    _ => None,
                };
                self.write(st, dst, r);
            }
            Op::Cmov { cc, dst, src } => {
                let v = match st.flags.condition(cc) {
                    Some(true) => self.read(st, src, space),
                    // A 32-bit cmov zero-extends its destination even when the move does not
                    // happen.
                    Some(false) => self.read(st, dst, space),
                    None => None,
                };
                self.write(st, dst, v);
            }
            Op::Set { cc, dst } => {
                let v = st.flags.condition(cc).map(u64::from);
                self.write(st, dst, v);
            }
            Op::Push { src } => {
                let v = self.read(st, src, space);
                self.push(st, v);
            }
            Op::Pop { dst } => {
                let rsp = st.regs.get(RSP);
                st.regs.set(RSP, rsp.map(|v| v.wrapping_add(8)));
                let v = rsp.and_then(|a| st.mem.read_u64(a, 8, space));
                st.regs.write_slot(dst.slot(), v);
            }
            Op::Call => self.push(st, Some(self.imm)),
            Op::Ret => {
                let rsp = st.regs.get(RSP).map(|v| v.wrapping_add(8 + self.imm));
                st.regs.set(RSP, rsp);
            }
            Op::Nothing => {}
            Op::Jcc { cc, differs } => {
                if let Some(next) = next {
                    if differs {
                        st.flags.constrain(cc, next == self.imm);
                    }
                }
            }
        }
    }

    /// An operand's value, zero-extended from its width, if known.
    #[inline]
    fn read(&self, st: &State, o: Operand, space: &AddressSpace) -> Option<u64> {
        match o {
            Operand::Reg(s) => st.regs.read_slot(s.slot()),
            Operand::Mem(w) => {
                let a = address(st, &self.addr)?;
                st.mem.read_u64(a, u32::from(w), space)
            }
            Operand::Imm => Some(self.imm),
        }
    }

    /// Writes an operand with a value or unknown; a store to an address nobody knows may
    /// have hit any byte.
    #[inline]
    fn write(&self, st: &mut State, o: Operand, v: Option<u64>) {
        match o {
            Operand::Reg(s) => st.regs.write_slot(s.slot(), v),
            Operand::Mem(w) => match address(st, &self.addr) {
                Some(a) => st.mem.store(a, u32::from(w), v),
                None => {
                    why::insist(Cause::UnknownAddress(self.mnemonic));
                    st.mem.forget_all();
                }
            },
            Operand::Imm => {}
        }
    }

    fn push(&self, st: &mut State, value: Option<u64>) {
        let rsp = st.regs.get(RSP).map(|v| v.wrapping_sub(8));
        st.regs.set(RSP, rsp);
        match rsp {
            Some(a) => st.mem.store(a, 8, value),
            None => {
                why::insist(Cause::UnknownAddress(iced_x86::Mnemonic::Push));
                st.mem.forget_all()
            }
        }
    }
}

/// The address of the memory operand: the base, then the index, then the segment's base,
/// each read in that order so that the first unknown one is the cause noted.
#[inline]
fn address(st: &State, a: &Addr) -> Option<u64> {
    let mut x = a.disp;
    if let Some(b) = a.base {
        x = x.wrapping_add(st.regs.get(Reg::Gpr(b))?);
    }
    if let Some(i) = a.index {
        x = x.wrapping_add(st.regs.get(Reg::Gpr(i))?.wrapping_mul(u64::from(a.scale)));
    }
    match a.segment {
        Segment::Zero => Some(x),
        Segment::Fs => Some(st.regs.get(Reg::FsBase)?.wrapping_add(x)),
        Segment::Gs => Some(st.regs.get(Reg::GsBase)?.wrapping_add(x)),
    }
}
