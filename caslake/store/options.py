"""``StorageOptions``: the keys a caller may pass as ``storage_options``.

Only ``s3://``, Azure (``az://``, ``abfs[s]://``) and ``gs://`` URIs take storage
options (:func:`caslake.store.open_store` rejects any for ``memory://`` and local
paths, which read no option and no environment variable).
:func:`caslake.store.s3.resolve_s3_settings`,
:func:`caslake.store.azure.resolve_azure_settings` and
:func:`caslake.store.gcs.resolve_gcs_settings` read them, each only the
keys of its own backend (marked below; the client keys at the end are
shared): each key is matched case-insensitively, the aliases listed below name
the same setting, and a key it does not know raises StoreConfigError.  A key
left out (or given as ``None``/``""``) falls back to the environment variable
named beside it, then to the default.

This is a type for annotations only; at run time ``storage_options`` is any
plain ``dict``.
"""

from __future__ import annotations

from typing import TypedDict


class StorageOptions(TypedDict, total=False):
    """Connection settings for an ``s3://``, Azure or ``gs://`` table (like obstore's ``S3Config``).

    Values may also be given as strings (as Spark options always are):
    booleans as ``true``/``false``/``1``/``0``/``yes``/``no``, numbers as text.

    Examples:
        >>> import caslake
        >>> opts = caslake.StorageOptions(endpoint_url='http://127.0.0.1:9000', region='us-east-1')
        >>> t = caslake.open_table('s3://bucket/events', storage_options=opts)  # doctest: +SKIP
    """

    #: S3 endpoint (``http(s)://host:port``), for MinIO, R2, moto...
    #: Env: ``AWS_ENDPOINT_URL_S3``, then ``AWS_ENDPOINT_URL``; default: AWS itself.
    #: Azure: the blob endpoint with the account (``http://127.0.0.1:10000/devstoreaccount1``
    #: for Azurite).  Env: ``AZURE_STORAGE_ENDPOINT``; default
    #: ``https://ACCOUNT.blob.core.windows.net``.
    #: GCS: the JSON API endpoint (an emulator's ``http://127.0.0.1:4443``).
    #: Env: ``STORAGE_EMULATOR_HOST``; default ``https://storage.googleapis.com``.
    endpoint_url: str
    #: Alias of ``endpoint_url``.
    endpoint: str
    #: Alias of ``endpoint_url``.
    aws_endpoint_url: str
    #: Region.  Env: ``AWS_REGION``, then ``AWS_DEFAULT_REGION``; default ``us-east-1``.
    region: str
    #: Alias of ``region``.
    region_name: str
    #: Alias of ``region``.
    aws_region: str
    #: Access key id.  Credentials are taken as a group: with an access key id
    #: here, the secret and token come from these options only; without one,
    #: all three come from ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` /
    #: ``AWS_SESSION_TOKEN``; with none at all, obstore's credential chain
    #: (instance profile, web identity, ECS) applies.
    access_key_id: str
    #: Alias of ``access_key_id``.
    aws_access_key_id: str
    #: Secret access key (needs ``access_key_id``).  Env: ``AWS_SECRET_ACCESS_KEY``.
    secret_access_key: str
    #: Alias of ``secret_access_key``.
    aws_secret_access_key: str
    #: Session token of temporary credentials.  Env: ``AWS_SESSION_TOKEN``.
    session_token: str
    #: Alias of ``session_token``.
    aws_session_token: str
    #: Azure storage account.  Env: ``AZURE_STORAGE_ACCOUNT_NAME``; an ``abfs[s]://`` URI
    #: names it in its host.
    account_name: str
    #: Azure account key (Shared Key auth).  Env: ``AZURE_STORAGE_ACCOUNT_KEY``.
    account_key: str
    #: Azure SAS token (``sv=...&sig=...``, a leading ``?`` is dropped).
    #: Env: ``AZURE_STORAGE_SAS_TOKEN``.
    sas_token: str
    #: Azure connection string (``AccountName=...;AccountKey=...;BlobEndpoint=...``,
    #: or ``SharedAccessSignature=...``); its fields fill what the keys above leave out.
    #: Env: ``AZURE_STORAGE_CONNECTION_STRING``.
    connection_string: str
    #: GCS: path of a service-account JSON key file.
    #: Env: ``GOOGLE_APPLICATION_CREDENTIALS``; without either, application-default
    #: credentials (``gcloud auth application-default login``, the metadata server).
    service_account_path: str
    #: Alias of ``service_account_path``.
    google_service_account: str
    #: Alias of ``service_account_path``.
    google_application_credentials: str
    #: GCS: the service-account JSON key itself (its text); wins over the path.
    service_account_key: str
    #: GCS project (only used to name the caller; objects need none).
    #: Env: ``GOOGLE_CLOUD_PROJECT``; default: the credentials' project.
    project_id: str
    #: Alias of ``project_id``.
    project: str
    #: GCS: send no credentials (emulators, public buckets).  No env; default: true
    #: when ``STORAGE_EMULATOR_HOST`` gives the endpoint and no credentials are set.
    anonymous: bool | str
    #: Allow a plain ``http://`` endpoint.  No env; default: whether the endpoint is http://.
    allow_http: bool | str
    #: Virtual-hosted-style requests (``bucket.host``) instead of path style.
    #: No env; default: False with an explicit endpoint, True on AWS.
    virtual_hosted_style: bool | str
    #: Alias of ``virtual_hosted_style``.
    virtual_hosted_style_request: bool | str
    #: Retries of one request by obstore (GCS: by caslake's own retries; the
    #: client library's are off).  No env; default 3.
    max_retries: int | str
    #: Whole retry budget of one request, in seconds (S3 and Azure).  No env; default 20.
    retry_timeout: float | str
    #: Connection timeout, in seconds.  No env; default 5.
    connect_timeout: float | str
    #: Whole-request timeout (body included), in seconds.  No env; default 120.
    request_timeout: float | str
