//! A translated instruction applied to a state: [`super::super::forward`]'s semantics for its
//! form, the same calls in the same order.

use super::{Addr, Compiled, Extend, Op, Operand, Segment};
use crate::image::AddressSpace;
use crate::state::alu::{signed_product, Alu, Shift};
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
                st.regs.write_gpr(dst.number, dst.shift, dst.bytes, v);
            }
            Op::Alu {
                alu,
                dst,
                src,
                width,
                same,
                generic,
            } => {
                let (a, b) = (self.read(st, dst, space), self.read(st, src, space));
                let (a, b) = match (alu, same) {
                    // xor r, r and sub r, r are zero whatever r held.
                    (Alu::Xor | Alu::Sub, true) => (Some(0), Some(0)),
                    _ => (a, b),
                };
                let r = match (a, b) {
                    (Some(a), Some(b)) => Some(alu.apply(&mut st.flags, &st.cpu, a, b, u32::from(width))),
                    _ => {
                        st.flags.apply(generic);
                        None
                    }
                };
                if alu.writes() {
                    self.write(st, dst, r);
                }
            }
            Op::Unary {
                unary,
                dst,
                width,
                generic,
            } => {
                let a = self.read(st, dst, space);
                let r = a.map(|a| unary.apply(&mut st.flags, a, u32::from(width)));
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
                let Some(count) = self.read(st, count, space).map(|c| Shift::count(c, w)) else {
                    st.flags.apply(generic);
                    self.write(st, dst, None);
                    return;
                };
                if count == 0 {
                    return;
                }
                let a = self.read(st, dst, space);
                let r = a.map(|a| shift.apply(&mut st.flags, a, count, w));
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
                let (a, b) = (self.read(st, a, space), self.read(st, b, space));
                st.flags.apply(generic);
                let r = a
                    .zip(b)
                    .map(|(a, b)| signed_product(&mut st.flags, a, b, u32::from(width)));
                self.write(st, dst, r);
            }
            Op::Cmov { cc, truth, dst, src } => {
                let v = match st.flags.known_by(truth).or_else(|| st.flags.condition(cc)) {
                    Some(true) => self.read(st, src, space),
                    // A 32-bit cmov zero-extends its destination even when the move does not
                    // happen.
                    Some(false) => self.read(st, dst, space),
                    None => None,
                };
                self.write(st, dst, v);
            }
            Op::Set { cc, truth, dst } => {
                let v = st
                    .flags
                    .known_by(truth)
                    .or_else(|| st.flags.condition(cc))
                    .map(u64::from);
                self.write(st, dst, v);
            }
            Op::Push { src } => {
                let v = self.read(st, src, space);
                self.push(st, v);
            }
            Op::Pop { dst } => {
                let rsp = st.regs.get(RSP);
                st.regs.set(RSP, rsp.map(|v| v.wrapping_add(8)));
                let v = rsp.and_then(|a| st.mem.load(a, 8, space));
                st.regs.write_gpr(dst.number, dst.shift, dst.bytes, v);
            }
            Op::Call => self.push(st, Some(self.imm)),
            Op::Ret => {
                let rsp = st.regs.get(RSP).map(|v| v.wrapping_add(8 + self.imm));
                st.regs.set(RSP, rsp);
            }
            Op::Nothing => {}
            Op::Jcc { cc, truth, differs } => {
                if let Some(next) = next {
                    let holds = next == self.imm;
                    if differs && st.flags.known_by(truth) != Some(holds) {
                        st.flags.constrain(cc, holds);
                    }
                }
            }
        }
    }

    /// An operand's value, zero-extended from its width, if known.
    #[inline]
    fn read(&self, st: &mut State, o: Operand, space: &AddressSpace) -> Option<u64> {
        match o {
            Operand::Reg(s) => st.regs.read_gpr(s.number, s.shift, s.bytes),
            Operand::Mem(w) => {
                let a = address(st, &self.addr)?;
                st.mem.load(a, u32::from(w), space)
            }
            Operand::Imm => Some(self.imm),
        }
    }

    /// Writes an operand with a value or unknown; a store to an address nobody knows may
    /// have hit any byte.
    #[inline]
    fn write(&self, st: &mut State, o: Operand, v: Option<u64>) {
        match o {
            Operand::Reg(s) => st.regs.write_gpr(s.number, s.shift, s.bytes, v),
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
#[inline(always)]
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
