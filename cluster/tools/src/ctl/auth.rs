//! `revkv ctl auth|user|role ...`: etcdctl's auth verbs, printed as etcdctl prints them ("User
//! app created", "Role app-rw updated"), or as the API's answers with `-o json`. A new password
//! comes from `--new-user-password` or, as etcdctl's prompt would take it, from one line of
//! standard input, so it need not appear in the process list.

use std::io::{BufRead, Read};

use clap::{Subcommand, ValueEnum};
use revkv_client::{AuthChangeResponse, Client, ClientError, PermissionKeys, RoleResponse};

use super::answers::print_either;
use crate::cli::OutputFormat;

/// The longest password line read from standard input.
const LONGEST_PASSWORD_LINE: usize = 1024;

/// `revkv ctl auth ...`.
#[derive(Subcommand, Debug, Clone)]
pub enum AuthCommand {
    /// Enable auth (a `root` user holding the `root` role must exist).
    Enable,
    /// Disable auth.
    Disable,
    /// Whether auth is enabled.
    Status,
}

/// `revkv ctl user ...`.
#[derive(Subcommand, Debug, Clone)]
pub enum UserCommand {
    /// Add a user (password from --new-user-password or one line of standard input).
    Add {
        name: String,
        #[arg(long)]
        new_user_password: Option<String>,
    },
    /// Delete a user.
    Delete { name: String },
    /// Every user's name.
    List,
    /// A user's roles.
    Get { name: String },
    /// Change a user's password (from --new-user-password or standard input).
    Passwd {
        name: String,
        #[arg(long)]
        new_user_password: Option<String>,
    },
    /// Grant a role to a user.
    GrantRole { user: String, role: String },
    /// Revoke a role from a user.
    RevokeRole { user: String, role: String },
}

/// What a permission grants, as etcdctl spells it.
#[derive(ValueEnum, Debug, Clone, Copy)]
pub enum PermissionArg {
    Read,
    Write,
    Readwrite,
}

/// `revkv ctl role ...`.
#[derive(Subcommand, Debug, Clone)]
pub enum RoleCommand {
    /// Add a role.
    Add { name: String },
    /// Delete a role (and take it from every user).
    Delete { name: String },
    /// Every role's name.
    List,
    /// A role's permissions.
    Get { name: String },
    /// Grant a permission on KEY, [KEY, RANGE_END), or every key under KEY with --prefix.
    GrantPermission {
        role: String,
        #[arg(value_enum)]
        permission: PermissionArg,
        key: String,
        range_end: Option<String>,
        #[arg(long, conflicts_with = "range_end")]
        prefix: bool,
    },
    /// Revoke the permission on exactly KEY, [KEY, RANGE_END), or the prefix KEY.
    RevokePermission {
        role: String,
        key: String,
        range_end: Option<String>,
        #[arg(long, conflicts_with = "range_end")]
        prefix: bool,
    },
}

pub async fn auth(
    client: &Client,
    format: OutputFormat,
    command: AuthCommand,
) -> Result<(), ClientError> {
    match command {
        AuthCommand::Enable => changed(
            format,
            client.auth_enable().await?,
            "Authentication Enabled",
        ),
        AuthCommand::Disable => changed(
            format,
            client.auth_disable().await?,
            "Authentication Disabled",
        ),
        AuthCommand::Status => {
            let answer = client.auth_status().await?;
            print_either(format, &answer, || {
                format!(
                    "Authentication Status: {}\nAuthRevision: {}",
                    answer.enabled, answer.auth_revision
                )
            });
            Ok(())
        }
    }
}

pub async fn user(
    client: &Client,
    format: OutputFormat,
    command: UserCommand,
) -> Result<(), ClientError> {
    match command {
        UserCommand::Add {
            name,
            new_user_password,
        } => {
            let password = password_from(new_user_password)?;
            let answer = client.user_add(&name, &password).await?;
            changed(format, answer, &format!("User {name} created"))
        }
        UserCommand::Delete { name } => {
            let answer = client.user_delete(&name).await?;
            changed(format, answer, &format!("User {name} deleted"))
        }
        UserCommand::List => {
            let answer = client.user_list().await?;
            print_either(format, &answer, || answer.names.join("\n"));
            Ok(())
        }
        UserCommand::Get { name } => {
            let answer = client.user_get(&name).await?;
            print_either(format, &answer, || {
                format!("User: {}\nRoles: {}", answer.name, answer.roles.join(" "))
            });
            Ok(())
        }
        UserCommand::Passwd {
            name,
            new_user_password,
        } => {
            let password = password_from(new_user_password)?;
            let answer = client.user_change_password(&name, &password).await?;
            changed(format, answer, "Password updated")
        }
        UserCommand::GrantRole { user, role } => {
            let answer = client.user_grant_role(&user, &role).await?;
            changed(
                format,
                answer,
                &format!("Role {role} is granted to user {user}"),
            )
        }
        UserCommand::RevokeRole { user, role } => {
            let answer = client.user_revoke_role(&user, &role).await?;
            changed(
                format,
                answer,
                &format!("Role {role} is revoked from user {user}"),
            )
        }
    }
}

pub async fn role(
    client: &Client,
    format: OutputFormat,
    command: RoleCommand,
) -> Result<(), ClientError> {
    match command {
        RoleCommand::Add { name } => {
            let answer = client.role_add(&name).await?;
            changed(format, answer, &format!("Role {name} created"))
        }
        RoleCommand::Delete { name } => {
            let answer = client.role_delete(&name).await?;
            changed(format, answer, &format!("Role {name} deleted"))
        }
        RoleCommand::List => {
            let answer = client.role_list().await?;
            print_either(format, &answer, || answer.names.join("\n"));
            Ok(())
        }
        RoleCommand::Get { name } => {
            let answer = client.role_get(&name).await?;
            print_either(format, &answer, || role_with_its_permissions(&answer));
            Ok(())
        }
        RoleCommand::GrantPermission {
            role,
            permission,
            key,
            range_end,
            prefix,
        } => {
            let keys = permission_keys(key, range_end, prefix);
            let answer = client
                .role_grant_permission(&role, permission_name(permission), &keys)
                .await?;
            changed(format, answer, &format!("Role {role} updated"))
        }
        RoleCommand::RevokePermission {
            role,
            key,
            range_end,
            prefix,
        } => {
            let keys = permission_keys(key, range_end, prefix);
            let answer = client.role_revoke_permission(&role, &keys).await?;
            let revoked = format!("Permission of role {role} is revoked");
            changed(format, answer, &revoked)
        }
    }
}

/// A role in the table format: `Role NAME`, then one tab-indented line per permission with its
/// kind, its key and where its range ends.
fn role_with_its_permissions(answer: &RoleResponse) -> String {
    let mut lines = vec![format!("Role {}", answer.name)];
    for permission in &answer.permissions {
        lines.push(format!(
            "\t{} {}{}",
            permission.permission,
            permission.key,
            range_end_text(permission.range_end.as_deref())
        ));
    }
    lines.join("\n")
}

/// Where a permission's range ends, as it follows the key: nothing for the key alone, every key
/// from it on for the end `"\0"`, or ` to END`.
fn range_end_text(range_end: Option<&str>) -> String {
    match range_end {
        None => String::new(),
        Some("\0") => " (and every key after it)".to_string(),
        Some(end) => format!(" to {end}"),
    }
}

/// A permission's kind as the API names it.
fn permission_name(permission: PermissionArg) -> &'static str {
    match permission {
        PermissionArg::Read => "read",
        PermissionArg::Write => "write",
        PermissionArg::Readwrite => "readwrite",
    }
}

fn permission_keys(key: String, range_end: Option<String>, prefix: bool) -> PermissionKeys {
    match (range_end, prefix) {
        (Some(range_end), _) => PermissionKeys::Range { key, range_end },
        (None, true) => PermissionKeys::Prefix(key),
        (None, false) => PermissionKeys::Key(key),
    }
}

fn changed(
    format: OutputFormat,
    answer: AuthChangeResponse,
    sentence: &str,
) -> Result<(), ClientError> {
    print_either(format, &answer, || sentence.to_string());
    Ok(())
}

/// The password given, or one line of standard input (without its line ending).
fn password_from(given: Option<String>) -> Result<String, ClientError> {
    if let Some(password) = given {
        return Ok(password);
    }
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .by_ref()
        .take(LONGEST_PASSWORD_LINE as u64 + 1)
        .read_line(&mut line)
        .map_err(|error| ClientError::Invalid {
            message: format!("cannot read the password from standard input: {error}"),
        })?;
    let password = line.trim_end_matches(['\r', '\n']).to_string();
    if password.is_empty() || password.len() > LONGEST_PASSWORD_LINE {
        return Err(ClientError::Invalid {
            message: format!(
                "give the password with --new-user-password or as one line of standard input \
                 (1 to {LONGEST_PASSWORD_LINE} bytes)"
            ),
        });
    }
    Ok(password)
}
