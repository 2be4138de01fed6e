"""The user's commands against a deployed WheelFoundry stack (a real account or `local up`).

    wheelfoundry start REQUEST|PRESET     validate here, start a run, wait for the stack's Validate; prints its name
    wheelfoundry status [RUN] [--watch]   per job: executor, state, stage, elapsed, estimated vs actual $
    wheelfoundry runs                     recent runs with their outcome
    wheelfoundry logs RUN JOB [--follow]  the job's build log
    wheelfoundry fetch RUN|CHANNEL [PACKAGE] --dest DIR   wheels, each only if its signed provenance verifies
    wheelfoundry cancel RUN               StopExecution, then what the reaper ended
    wheelfoundry index list [CHANNEL]     channels, or a channel's wheels

The stack is found by name (`--stack`, $WHEELFOUNDRY_STACK, samconfig.toml's stack_name, else
"wheelfoundry") through its CloudFormation outputs, with boto3's default credentials and region.
`--endpoint-url` (or $WHEELFOUNDRY_ENDPOINT_URL, or boto3's own $AWS_ENDPOINT_URL) points them at
`wheelfoundry local up`. Tables by default, `--json` for scripts.

Exit codes: 0 done (status: the run succeeded or is still running); 1 the run failed, was aborted
or timed out; 2 invalid input (every problem printed); 3 not found (stack, run, job, channel,
package); 4 not ready yet (fetch of a running run, logs of a job not started); 5 AWS refused or
could not be reached (credentials, permissions, endpoint).
"""

from __future__ import annotations

EXIT_OK, EXIT_FAILED, EXIT_INVALID, EXIT_NOT_FOUND, EXIT_NOT_READY, EXIT_AWS = 0, 1, 2, 3, 4, 5


class UserError(Exception):
    """A problem the user can act on; the message says what and the class the exit code."""

    exit_code = EXIT_FAILED


class NotFound(UserError):
    exit_code = EXIT_NOT_FOUND


class NotReady(UserError):
    exit_code = EXIT_NOT_READY


class AwsProblem(UserError):
    exit_code = EXIT_AWS
