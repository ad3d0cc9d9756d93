# kubeapi/protobuf.py: placeholder until the decoder lands.
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"


def decode(raw):
    from . import errors
    raise errors.ApiError(415, "UnsupportedMediaType", "protobuf bodies are not supported yet")
