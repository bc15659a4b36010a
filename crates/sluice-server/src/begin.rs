//! The begin side of every upload that makes an object: the key (the client's,
//! or the key template's), the caller's authorization for it, the pre-create
//! hook (the one place it is asked), and the [`Origin`] the upload carries to
//! the completion point. PUT, each file of a form, a tus creation (and its
//! concatenation), and a direct upload's signing all begin here, so a new kind
//! of upload is an adapter that says what it knows and goes on with what
//! [`Begun`] gives back.

use std::collections::BTreeMap;
use std::sync::Arc;

use sluice_upload::{Origin, UploadKind};

use crate::admission::Party;
use crate::auth::{Grant, Op};
use crate::error::ApiError;
use crate::hooks::{Hooks, PreCreate};
use crate::keys::{validate_client_key, KeyInputs, KeyTemplate};

/// Where the key comes from.
#[derive(Debug, Clone)]
pub enum KeyFrom {
    /// The client named it (`PUT /v1/objects/{key}`).
    Client(String),
    /// The key template makes it, from the file name and this id.
    Template { filename: String, id: uuid::Uuid },
}

/// What an upload says about itself as it begins.
#[derive(Debug, Clone)]
pub struct Asked {
    pub kind: UploadKind,
    pub key: KeyFrom,
    /// The declared size, when known before the body.
    pub size: Option<u64>,
    pub content_type: Option<String>,
    pub metadata: BTreeMap<String, String>,
    pub filename: Option<String>,
    /// False for what becomes no object of its own (a tus partial upload:
    /// its final upload is asked about).
    pub ask_hook: bool,
}

/// An upload allowed to go on, as the hook left it.
#[derive(Debug, Clone)]
pub struct Begun {
    pub key: String,
    pub content_type: Option<String>,
    pub metadata: BTreeMap<String, String>,
    /// The hook replaced the metadata.
    pub metadata_replaced: bool,
    /// What the object's announcement carries.
    pub origin: Arc<Origin>,
    tenant: String,
}

impl Begun {
    /// Who waits for admission with this upload.
    pub fn party(&self) -> Party {
        Party::for_key(self.tenant.clone(), &self.key)
    }
}

/// The begin service; see the module documentation.
#[derive(Clone)]
pub struct Begin {
    template: Arc<KeyTemplate>,
    hooks: Arc<Hooks>,
}

impl Begin {
    pub fn new(template: KeyTemplate, hooks: Hooks) -> Begin {
        Begin {
            template: Arc::new(template),
            hooks: Arc::new(hooks),
        }
    }

    /// The key `asked` gets, checked, the hook asked, the origin made.
    pub async fn begin(&self, grant: &Grant, asked: Asked) -> Result<Begun, ApiError> {
        let key = match asked.key {
            KeyFrom::Client(key) => key,
            KeyFrom::Template { filename, id } => {
                grant.generated_key(self.template.render(&KeyInputs {
                    tenant: &grant.tenant,
                    filename: &filename,
                    now: time::OffsetDateTime::now_utc(),
                    uuid: id,
                }))
            }
        };
        validate_client_key(&key).map_err(ApiError::InvalidKey)?;
        grant.check(Op::Put, &key)?;
        let (mut key, mut content_type, mut metadata) = (key, asked.content_type, asked.metadata);
        let mut metadata_replaced = false;
        if asked.ask_hook {
            let mut decision = self
                .hooks
                .pre_create(&PreCreate {
                    kind: "upload.pre_create",
                    upload_kind: asked.kind.as_str(),
                    key: key.clone(),
                    size: asked.size,
                    content_type: content_type.clone(),
                    metadata: metadata.clone(),
                    filename: asked.filename,
                    tenant: grant.owner(),
                })
                .await?;
            key = decision.key(key, grant)?;
            content_type = decision.content_type.take().or(content_type);
            if let Some(replaced) = decision.metadata.take() {
                metadata = replaced;
                metadata_replaced = true;
            }
        }
        let origin = Arc::new(Origin {
            kind: asked.kind,
            tenant: grant.owner(),
            content_type: content_type.clone(),
            metadata: metadata.clone(),
            ..Origin::default()
        });
        Ok(Begun {
            key,
            content_type,
            metadata,
            metadata_replaced,
            origin,
            tenant: grant.tenant.clone(),
        })
    }
}
