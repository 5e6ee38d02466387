"""A DR service's status (`DrService.Status`) in words, one line: what `strongroom up`,
`strongroom status` and `strongroom dr status` print for each site's DR service."""

from __future__ import annotations

from strongroom.api.v1 import dr_pb2

__all__ = ["dr_state"]


def dr_state(st: dr_pb2.DrStatus) -> str:
    """What the DR service does now, as its site's record says (docs/dr.md): shipping (or stopped
    for an activation under way), and how far behind; idle at a primary; fencing the old primary
    after an activation; fenced."""
    if st.state in ("shipping", "activating"):
        doing = "shipping" if st.state == "shipping" else "activating (shipping stopped)"
        return (f"{doing} from {', '.join(st.primary) or '(no address)'} (generation {st.generation}): standby at "
                f"{st.standby_last_index}, primary commit {st.primary_commit_index}: {st.entries_behind} entries, "
                f"{st.messages_behind} messages, {st.acks_behind} acks, {st.seconds_behind:.1f} s behind")
    other = ", ".join(st.standby) or "(no address)"
    if st.state == "primary" and st.generation:
        return (f"primary of generation {st.generation} (activated): tells the old primary at {other} it is "
                f"superseded; it answers {st.peer_role or 'nothing yet'}")
    if st.state == "primary":
        return f"primary of generation {st.generation}: nothing to ship; the standby site is at {other}"
    if st.state == "fenced":
        return (f"fenced, generation {st.generation}: the primary is at {', '.join(st.primary) or '(no address)'}; "
                f"ships here once this site is demoted (`strongroom dr demote`)")
    return f"{st.state or 'unknown'}, generation {st.generation}"
