//! The Merkle tree against RFC 9162 itself: an implementation written here
//! from the RFC's text (§2.1.1 MTH, §2.1.3.1 PATH, §2.1.4.1 PROOF/SUBPROOF),
//! over plain lists of leaves and sharing nothing with the code under test,
//! must agree with `agentledger::audit::merkle` on every root and proof;
//! and the Certificate Transparency reference vectors (RFC 6962 test data,
//! as published by the transparency-dev project) hold.

mod common;

use agentledger::audit::merkle::{
    consistency_proof, inclusion_proof, leaf_hash, root, verify_consistency, verify_inclusion,
    MemoryTree,
};

type H = [u8; 32];

fn sha(parts: &[&[u8]]) -> H {
    common::sha256(parts)
}

/// "The largest power of two smaller than n".
fn k_of(n: usize) -> usize {
    let mut k = 1;
    while k * 2 < n {
        k *= 2;
    }
    k
}

/// MTH(D[n]) over the entries themselves.
fn mth(d: &[Vec<u8>]) -> H {
    match d.len() {
        0 => sha(&[]),
        1 => sha(&[&[0], &d[0]]),
        n => {
            let k = k_of(n);
            sha(&[&[1], &mth(&d[..k]), &mth(&d[k..])])
        }
    }
}

/// PATH(m, D[n]).
fn path(m: usize, d: &[Vec<u8>]) -> Vec<H> {
    let n = d.len();
    if n <= 1 {
        return vec![];
    }
    let k = k_of(n);
    if m < k {
        let mut p = path(m, &d[..k]);
        p.push(mth(&d[k..]));
        p
    } else {
        let mut p = path(m - k, &d[k..]);
        p.push(mth(&d[..k]));
        p
    }
}

/// SUBPROOF(m, D[n], b).
fn subproof(m: usize, d: &[Vec<u8>], b: bool) -> Vec<H> {
    let n = d.len();
    if m == n {
        return if b { vec![] } else { vec![mth(d)] };
    }
    let k = k_of(n);
    if m <= k {
        let mut p = subproof(m, &d[..k], b);
        p.push(mth(&d[k..]));
        p
    } else {
        let mut p = subproof(m - k, &d[k..], false);
        p.push(mth(&d[..k]));
        p
    }
}

fn entries(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("entry {i}").repeat(i % 3 + 1).into_bytes())
        .collect()
}

fn tree_of(d: &[Vec<u8>]) -> MemoryTree {
    let mut t = MemoryTree::new();
    for e in d {
        t.push(leaf_hash(e));
    }
    t
}

#[test]
fn roots_and_proofs_agree_with_the_rfcs_definitions() {
    let d = entries(41);
    let t = tree_of(&d);
    for n in 0..=d.len() {
        let r = root(&t, n as u64).unwrap();
        assert_eq!(r, mth(&d[..n]), "MTH of {n}");
        for m in 0..n {
            let p = inclusion_proof(&t, m as u64, n as u64).unwrap().unwrap();
            assert_eq!(p, path(m, &d[..n]), "PATH({m}, D[{n}])");
            verify_inclusion(&leaf_hash(&d[m]), m as u64, n as u64, &p, &r).unwrap();
        }
        for m in 1..=n {
            let p = consistency_proof(&t, m as u64, n as u64).unwrap().unwrap();
            assert_eq!(p, subproof(m, &d[..n], true), "PROOF({m}, D[{n}])");
            verify_consistency(m as u64, n as u64, &mth(&d[..m]), &r, &p).unwrap();
        }
    }
}

fn unhex(s: &str) -> Vec<u8> {
    hex::decode(s).unwrap()
}

fn h(s: &str) -> H {
    unhex(s).try_into().unwrap()
}

#[test]
fn the_certificate_transparency_reference_vectors_hold() {
    let d: Vec<Vec<u8>> = [
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    ]
    .iter()
    .map(|s| unhex(s))
    .collect();
    let roots = [
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    ];
    let t = tree_of(&d);
    for (n, want) in roots.iter().enumerate() {
        assert_eq!(hex::encode(root(&t, n as u64).unwrap()), *want, "size {n}");
    }
    let inclusion = [
        (
            0,
            [
                "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
            ],
        ),
        (
            5,
            [
                "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
                "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            ],
        ),
    ];
    for (index, want) in inclusion {
        let p = inclusion_proof(&t, index, 8).unwrap().unwrap();
        assert_eq!(p, want.map(h).to_vec(), "inclusion of {index} in 8");
    }
    let consistency: [(u64, &[&str]); 2] = [
        (
            2,
            &[
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
            ],
        ),
        (
            6,
            &[
                "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
                "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            ],
        ),
    ];
    for (old, want) in consistency {
        let p = consistency_proof(&t, old, 8).unwrap().unwrap();
        let want: Vec<H> = want.iter().map(|s| h(s)).collect();
        assert_eq!(p, want, "consistency {old} → 8");
    }
}
