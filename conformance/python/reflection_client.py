"""A generic gRPC client of a Sessions host that knows no .proto file.

Over reflection v1alpha (the version grpcio-reflection's client speaks) it
lists the server's services, fetches the file that defines
agentsessions.v1.Sessions with its dependencies, builds message classes from
those descriptors and calls Sessions.ListSessions with them. Prints one JSON
object: {"services": [...], "sessions": [uid, ...]}.

    python reflection_client.py 127.0.0.1:8080 [project]
"""

import json
import sys

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

SERVICE = "agentsessions.v1.Sessions"


def ask(stub, **request) -> reflection_pb2.ServerReflectionResponse:
    replies = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(**request)]), timeout=10)
    reply = next(replies)
    if reply.HasField("error_response"):
        err = reply.error_response
        raise SystemExit(f"reflection error {err.error_code}: {err.error_message}")
    return reply


def files(reply: reflection_pb2.ServerReflectionResponse) -> dict:
    protos = [descriptor_pb2.FileDescriptorProto.FromString(b) for b in reply.file_descriptor_response.file_descriptor_proto]
    return {p.name: p for p in protos}


def main(address: str, project: str) -> None:
    channel = grpc.insecure_channel(address)
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    services = [s.name for s in ask(stub, list_services="").list_services_response.service]

    protos = files(ask(stub, file_containing_symbol=SERVICE))
    pool = descriptor_pool.DescriptorPool()
    added: set = set()

    def add(name: str) -> None:
        # A pool takes a file only after everything it imports.
        if name in added:
            return
        if name not in protos:
            protos.update(files(ask(stub, file_by_filename=name)))
        for dep in protos[name].dependency:
            add(dep)
        pool.AddSerializedFile(protos[name].SerializeToString())
        added.add(name)

    for name in list(protos):
        add(name)

    method = pool.FindServiceByName(SERVICE).FindMethodByName("ListSessions")
    request_type = message_factory.GetMessageClass(method.input_type)
    response_type = message_factory.GetMessageClass(method.output_type)
    call = channel.unary_unary(
        f"/{SERVICE}/{method.name}",
        request_serializer=request_type.SerializeToString,
        response_deserializer=response_type.FromString,
    )
    response = call(request_type(project=project), timeout=10)
    print(json.dumps({"services": services, "sessions": [s.metadata.uid for s in response.sessions]}))


if __name__ == "__main__":
    try:
        main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "default")
    except grpc.RpcError as e:
        raise SystemExit(f"rpc failed: {e.code().name}: {e.details()}")
