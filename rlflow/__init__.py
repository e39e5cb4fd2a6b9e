"""rlflow: the command line (`rlflow <stage>`) over taso_env, worldmodel and controller."""
