"""Real servers the tests start on 127.0.0.1 and stop after: SeaweedFS (S3), giftless
(Git LFS), and a fault-injecting HTTP proxy that goes in front of either."""
