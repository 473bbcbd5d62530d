//! The protobuf messages etcd keeps in its buckets, with etcd's field numbers (3.4
//! `mvcc/mvccpb/kv.proto`, `lease/leasepb/lease.proto`, `auth/authpb/auth.proto`; 3.5 has the same
//! messages under `api/` and `server/`). Written by hand with prost's derive, because these five
//! small messages are all this crate needs and a build script with protoc would be more to keep.

/// `mvccpb.KeyValue`: one entry of the `key` bucket. A tombstone holds only `key`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    #[prost(int64, tag = "2")]
    pub create_revision: i64,
    #[prost(int64, tag = "3")]
    pub mod_revision: i64,
    #[prost(int64, tag = "4")]
    pub version: i64,
    #[prost(bytes = "vec", tag = "5")]
    pub value: Vec<u8>,
    #[prost(int64, tag = "6")]
    pub lease: i64,
}

/// `leasepb.Lease`: one entry of the `lease` bucket. `remaining_ttl` is written only with lease
/// checkpointing on; 0 means the full TTL.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Lease {
    #[prost(int64, tag = "1")]
    pub id: i64,
    #[prost(int64, tag = "2")]
    pub ttl: i64,
    #[prost(int64, tag = "3")]
    pub remaining_ttl: i64,
}

/// `authpb.UserAddOptions`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct UserAddOptions {
    #[prost(bool, tag = "1")]
    pub no_password: bool,
}

/// `authpb.User`: one entry of `authUsers`. `password` is a bcrypt hash.
#[derive(Clone, PartialEq, prost::Message)]
pub struct User {
    #[prost(bytes = "vec", tag = "1")]
    pub name: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub password: Vec<u8>,
    #[prost(string, repeated, tag = "3")]
    pub roles: Vec<String>,
    #[prost(message, optional, tag = "4")]
    pub options: Option<UserAddOptions>,
}

/// `authpb.Permission`: `perm_type` is READ 0, WRITE 1, READWRITE 2; an empty `range_end` means
/// the single key, `"\0"` every key from `key` on.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Permission {
    #[prost(int32, tag = "1")]
    pub perm_type: i32,
    #[prost(bytes = "vec", tag = "2")]
    pub key: Vec<u8>,
    #[prost(bytes = "vec", tag = "3")]
    pub range_end: Vec<u8>,
}

/// `authpb.Role`: one entry of `authRoles`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Role {
    #[prost(bytes = "vec", tag = "1")]
    pub name: Vec<u8>,
    #[prost(message, repeated, tag = "2")]
    pub key_permission: Vec<Permission>,
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    #[test]
    fn a_tombstone_as_etcd_writes_it_decodes_to_its_key_alone() {
        // Seen in an etcd 3.4 file: `0a 03 66 6f 6f`, a delete of "foo".
        let tombstone = KeyValue::decode(&[0x0a, 0x03, b'f', b'o', b'o'][..]).unwrap();
        assert_eq!(tombstone.key, b"foo");
        assert_eq!((tombstone.create_revision, tombstone.version), (0, 0));
    }

    #[test]
    fn a_lease_as_etcd_writes_it_decodes() {
        // Seen in an etcd 3.4 file: lease 0x2040a21c8aa9f709 with a TTL of 600 s.
        let mut bytes = vec![0x08];
        prost::encoding::encode_varint(0x2040_a21c_8aa9_f709, &mut bytes);
        bytes.extend_from_slice(&[0x10, 0xd8, 0x04]);
        let lease = Lease::decode(bytes.as_slice()).unwrap();
        assert_eq!(
            (lease.id, lease.ttl, lease.remaining_ttl),
            (0x2040_a21c_8aa9_f709, 600, 0)
        );
    }
}
