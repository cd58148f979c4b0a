"""Security with Kafka's configuration names and semantics: listeners with TLS, SASL (PLAIN, SCRAM-SHA-256/512),
SCRAM credential management, and ACLs enforced in front of every API.

    listeners.py  `listeners` / `listener.security.protocol.map`, the TLS context (stdlib ssl, PEM), and the
                  `User:<DN>` principal of a client certificate
    sasl.py       a connection's SecuritySession and the SaslHandshake / SaslAuthenticate APIs
    scram.py      SCRAM (RFC 5802/7677) and PLAIN on the server side; credentials are salted and hashed
    acl.py        ACL bindings, filters and the authorizer's decision (Kafka's StandardAuthorizer rules), pure
    store.py      ACLs and SCRAM credentials in a storage.Log under DATA_DIR/security, replayed at start
    apis.py       CreateAcls / DescribeAcls / DeleteAcls, Describe/AlterUserScramCredentials
    enforce.py    the authorization layer: wraps the registered handlers (ApiTable.wrap) with Kafka's checks
    part.py       the server part that ties them together

The group state machine and the data plane know nothing of principals: requests reach them already authorized
(and trimmed to what the caller may touch), and the errors for the rest are merged into their answers.
"""

from .part import Security

__all__ = ["Security"]
