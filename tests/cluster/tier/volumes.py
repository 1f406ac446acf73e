"""The Pod's volumes on this machine: ``emptyDir`` (a fresh directory per Pod), ``secret``, ``configMap``,
``downwardAPI`` and ``projected`` (service-account tokens from the TokenRequest API, ConfigMaps, Secrets,
the downward API), read from the API server as the node. ``fsGroup`` owns every volume (setgid
directories, group-readable files), as the kubelet applies it. Any other volume type fails to mount."""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .kubeapi import ApiError, KubeApi
from .podspec import field_value

DEFAULT_MODE = 0o644


class MountError(Exception):
    """A volume cannot be set up (the kubelet's FailedMount); the message is the kubelet's."""


async def read_data(api: KubeApi, kind: str, namespace: str, name: str) -> dict[str, str] | None:
    """A Secret's or ConfigMap's data as text, None when it does not exist."""
    plural = "secrets" if kind == "Secret" else "configmaps"
    try:
        obj = await api.get(f"/api/v1/namespaces/{namespace}/{plural}/{name}")
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
    if kind == "Secret":
        return {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}
    values: dict[str, str] = dict(obj.get("data") or {})
    values.update({k: base64.b64decode(v).decode() for k, v in (obj.get("binaryData") or {}).items()})
    return values


def _write_file(directory: Path, rel: str, text: str | bytes, mode: int, fs_group: int | None) -> None:
    path = directory / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(text.encode() if isinstance(text, str) else text)
    if fs_group is not None:
        os.chown(tmp, 0, fs_group)
        mode |= 0o040
    tmp.chmod(mode)
    tmp.replace(path)


class VolumeBuilder:
    def __init__(self, api: KubeApi, pod: Mapping[str, Any], root: Path) -> None:
        self.api = api
        self.pod = pod
        self.root = root
        self.namespace: str = pod["metadata"]["namespace"]
        psc = pod["spec"].get("securityContext") or {}
        self.fs_group: int | None = psc.get("fsGroup")

    async def build_all(self) -> dict[str, Path]:
        dirs: dict[str, Path] = {}
        for volume in self.pod["spec"].get("volumes") or []:
            dirs[volume["name"]] = await self.build(volume)
        return dirs

    def _fresh_dir(self, name: str) -> Path:
        directory = self.root / name
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True)
        if self.fs_group is not None:
            os.chown(directory, 0, self.fs_group)
            directory.chmod(0o2775)
        else:
            directory.chmod(0o755)
        return directory

    async def build(self, volume: Mapping[str, Any]) -> Path:
        name = volume["name"]
        if "emptyDir" in volume:
            directory = self.root / name
            if not directory.exists():
                directory = self._fresh_dir(name)
                directory.chmod(0o2777 if self.fs_group is not None else 0o777)
            return directory
        directory = self._fresh_dir(name)
        try:
            if "secret" in volume or "configMap" in volume:
                kind = "Secret" if "secret" in volume else "ConfigMap"
                source = volume.get("secret") or volume["configMap"]
                ref = source.get("secretName") or source.get("name")
                await self._keyed(directory, kind, ref, source, int(source.get("defaultMode", DEFAULT_MODE)))
            elif "downwardAPI" in volume:
                self._downward(
                    directory,
                    volume["downwardAPI"],
                    int(volume["downwardAPI"].get("defaultMode", DEFAULT_MODE)),
                )
            elif "projected" in volume:
                await self._projected(directory, volume["projected"])
            else:
                kinds = sorted(k for k in volume if k != "name")
                raise MountError(f"volume type {kinds} is not supported by the process kubelet")  # noqa: TRY301
        except MountError as exc:
            raise MountError(f'MountVolume.SetUp failed for volume "{name}" : {exc}') from None
        return directory

    async def _keyed(
        self, directory: Path, kind: str, ref: str, source: Mapping[str, Any], mode: int
    ) -> None:
        data = await read_data(self.api, kind, self.namespace, ref)
        if data is None:
            if source.get("optional"):
                return
            raise MountError(f'{kind.lower()} "{ref}" not found')
        items = source.get("items")
        pairs = (
            [(i["key"], i["path"], int(i.get("mode", mode))) for i in items]
            if items
            else [(k, k, mode) for k in data]
        )
        for key, rel, file_mode in pairs:
            if key not in data:
                if source.get("optional"):
                    continue
                raise MountError(
                    f"configmap references non-existent config key: {key}"
                    if kind == "ConfigMap"
                    else f"references non-existent secret key: {key}"
                )
            _write_file(directory, rel, data[key], file_mode, self.fs_group)

    def _downward(self, directory: Path, source: Mapping[str, Any], mode: int) -> None:
        for item in source.get("items") or []:
            if "fieldRef" not in item:
                raise MountError("downwardAPI: only fieldRef items are supported")
            value = field_value(self.pod, item["fieldRef"]["fieldPath"])
            _write_file(directory, item["path"], value, int(item.get("mode", mode)), self.fs_group)

    async def _projected(self, directory: Path, projected: Mapping[str, Any]) -> None:
        mode = int(projected.get("defaultMode", DEFAULT_MODE))
        for source in projected.get("sources") or []:
            if "serviceAccountToken" in source:
                token_source = source["serviceAccountToken"]
                token = await self.token(token_source)
                # The kubelet makes the token readable by the Pod's user (fsGroup, else 0600 to runAsUser).
                _write_file(
                    directory, token_source["path"], token, mode if self.fs_group else 0o644, self.fs_group
                )
            elif "configMap" in source or "secret" in source:
                kind = "ConfigMap" if "configMap" in source else "Secret"
                inner = source.get("configMap") or source["secret"]
                await self._keyed(directory, kind, inner["name"], inner, mode)
            elif "downwardAPI" in source:
                self._downward(directory, source["downwardAPI"], mode)
            else:
                raise MountError(f"projected source {sorted(source)} is not supported")

    async def token(self, source: Mapping[str, Any]) -> str:
        """A service-account token bound to this Pod, from the TokenRequest API."""
        meta = self.pod["metadata"]
        sa = self.pod["spec"].get("serviceAccountName") or "default"
        spec: dict[str, Any] = {
            "expirationSeconds": int(source.get("expirationSeconds", 3600)),
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]},
        }
        if source.get("audience"):
            spec["audiences"] = [source["audience"]]
        try:
            reply = await self.api.create(
                f"/api/v1/namespaces/{self.namespace}/serviceaccounts/{sa}/token",
                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
            )
        except ApiError as exc:
            raise MountError(f"failed to fetch token: {exc.message}") from None
        token: str = reply["status"]["token"]
        return token
