//! Where the XSAVE state components lie in the standard (non-compacted) format on the CPU a
//! recording was made on: the offset and size CPUID leaf 0DH enumerates for each component
//! (SDM vol. 1, 13.4: "the offset ... is enumerated by CPUID.(EAX=0DH,ECX=i):EBX").
//!
//! Intel's processors all enumerate the same offsets (AVX 576, MPX 960 and 1024, opmask 1088,
//! ZMM_Hi256 1152, Hi16_ZMM 1664, PKRU 2688), and rtit once took them as fixed; AMD's Zen 4,
//! which has AVX-512 but no MPX, puts opmask at 832, ZMM_Hi256 at 896 and Hi16_ZMM at 1408.
//! Linux's ptrace XSAVE register set and its signal frames use the same standard format with
//! the CPU's offsets, and so does XSAVE itself, so a recording keeps them
//! ([`super::CpuInfo::xsave_layout`]) and everything that reads or models an XSAVE area asks
//! here. The compacted format (XSAVEC, XSAVES) places components by their sizes alone.

use serde::{Deserialize, Serialize};

/// Components numbered below this are described (AMX's TILEDATA is 18).
pub const COMPONENTS: u32 = 19;

/// The standard-format offset and size of each XSAVE state component 2 and up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct XsaveLayout {
    /// Offset of component `i`, 0 where the CPU does not enumerate it.
    offset: [u16; COMPONENTS as usize],
    /// Size of component `i`, 0 where the CPU does not enumerate it.
    size: [u16; COMPONENTS as usize],
}

/// What every Intel processor with the component enumerates: `(component, offset, size)`.
const INTEL: [(u32, u16, u16); 9] = [
    (2, 576, 256),
    (3, 960, 64),
    (4, 1024, 64),
    (5, 1088, 64),
    (6, 1152, 512),
    (7, 1664, 1024),
    (9, 2688, 8),
    (17, 2752, 64),
    (18, 2816, 8192),
];

impl XsaveLayout {
    /// The layout every Intel processor enumerates.
    pub fn intel() -> Self {
        let mut l = Self::default();
        for (c, offset, size) in INTEL {
            l.offset[c as usize] = offset;
            l.size[c as usize] = size;
        }
        l
    }

    /// The layout from CPUID leaf 0DH: `subleaf(i)` is what CPUID returns in EAX (size) and
    /// EBX (offset) for ECX = i, if known. A component of size 0, or beyond 64 KiB, is absent.
    pub fn from_cpuid(subleaf: impl Fn(u32) -> Option<(u32, u32)>) -> Self {
        let mut l = Self::default();
        for c in 2..COMPONENTS {
            if let Some((size, offset)) = subleaf(c) {
                if let (Ok(size), Ok(offset), true) = (u16::try_from(size), u16::try_from(offset), size > 0) {
                    l.size[c as usize] = size;
                    l.offset[c as usize] = offset;
                }
            }
        }
        l
    }

    /// The layout in a table of CPUID results (the qemu backend's `cpuid.json`), if it has
    /// leaf 0DH.
    pub fn from_table(table: &[super::cpuid::CpuidLeaf]) -> Option<Self> {
        super::cpuid::lookup(table, 0xd, 0)?;
        Some(Self::from_cpuid(|c| {
            super::cpuid::lookup(table, 0xd, c).map(|r| (r[0], r[1]))
        }))
    }

    /// Component `c`'s offset in the standard format, if the CPU has it there (a supervisor
    /// component, which only XSAVES writes, has none). The legacy region (components 0 and
    /// 1) and the header are not components of this table.
    pub fn offset(&self, c: u32) -> Option<u64> {
        let i = usize::try_from(c).ok().filter(|&i| i < COMPONENTS as usize)?;
        (self.size[i] > 0 && self.offset[i] > 0).then_some(u64::from(self.offset[i]))
    }

    /// Component `c`'s size, if the CPU has it.
    pub fn size(&self, c: u32) -> Option<u64> {
        let i = usize::try_from(c).ok().filter(|&i| i < COMPONENTS as usize)?;
        (self.size[i] > 0).then_some(u64::from(self.size[i]))
    }

    /// Where component `c` ends in the standard format (x87 and SSE: the legacy region's 512).
    pub fn end(&self, c: u32) -> Option<u64> {
        match c {
            0 | 1 => Some(512),
            _ => Some(self.offset(c)? + self.size(c)?),
        }
    }

    /// The components it describes, with their offsets (0: none in the standard format) and
    /// sizes.
    pub fn components(&self) -> impl Iterator<Item = (u32, u64, u64)> + '_ {
        (2..COMPONENTS).filter_map(|c| Some((c, self.offset(c).unwrap_or(0), self.size(c)?)))
    }
}

/// In a manifest: `[[component, offset, size], ...]`.
impl Serialize for XsaveLayout {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let v: Vec<[u64; 3]> = self.components().map(|(c, o, n)| [u64::from(c), o, n]).collect();
        v.serialize(s)
    }
}

impl<'de> Deserialize<'de> for XsaveLayout {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v: Vec<[u64; 3]> = Vec::deserialize(d)?;
        let mut l = Self::default();
        for [c, offset, size] in v {
            let bad = || serde::de::Error::custom(format!("XSAVE component {c}: offset {offset}, size {size}"));
            let i = usize::try_from(c)
                .ok()
                .filter(|&i| (2..COMPONENTS as usize).contains(&i))
                .ok_or_else(bad)?;
            l.offset[i] = u16::try_from(offset).map_err(|_| bad())?;
            l.size[i] = u16::try_from(size).map_err(|_| bad())?;
        }
        Ok(l)
    }
}

/// What CPUID leaf 0DH says on an AMD EPYC of the Zen 4 generation: AVX-512 without MPX, so
/// the opmasks follow AVX at 832 (for tests).
#[cfg(test)]
pub(crate) fn zen4() -> XsaveLayout {
    XsaveLayout::from_cpuid(|c| match c {
        2 => Some((256, 576)),
        5 => Some((64, 832)),
        6 => Some((512, 896)),
        7 => Some((1024, 1408)),
        9 => Some((8, 2432)),
        _ => Some((0, 0)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intel_and_zen4_differ_where_amd_has_no_mpx() {
        let intel = XsaveLayout::intel();
        assert_eq!(intel.offset(7), Some(1664));
        assert_eq!(intel.end(6), Some(1664));
        let zen4 = zen4();
        assert_eq!(zen4.offset(5), Some(832));
        assert_eq!(zen4.offset(3), None);
        assert_eq!(zen4.end(7), Some(2432));
        assert_eq!(zen4.end(1), Some(512));
        let json = serde_json::to_string(&zen4).expect("serialises");
        assert_eq!(json, "[[2,576,256],[5,832,64],[6,896,512],[7,1408,1024],[9,2432,8]]");
        assert_eq!(serde_json::from_str::<XsaveLayout>(&json).expect("reads back"), zen4);
        assert!(serde_json::from_str::<XsaveLayout>("[[1,0,512]]").is_err());
        assert!(serde_json::from_str::<XsaveLayout>("[[7,70000,64]]").is_err());
    }
}
